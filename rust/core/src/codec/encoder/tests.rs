use super::*;

#[path = "../../../tests/common/rng.rs"]
mod rng;
use rng::Rng;

/// Text-like bytes: words from a small vocabulary, so that matches are plentiful.
fn text(rng: &mut Rng, n: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "was",
        "for",
        "on",
        "that",
        "with",
        "government",
        "said",
        "minister",
        "people",
        "football",
        "election",
        "company",
        "market",
        "percent",
        "the first",
        "of the",
        "in the",
        "new",
        "year",
        "would",
        "which",
        "their",
        "has been",
    ];
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        out.extend_from_slice(WORDS[rng.below(WORDS.len())].as_bytes());
        out.push(if rng.below(12) == 0 { b'.' } else { b' ' });
    }
    out.truncate(n);
    out
}

/// liblz4's decoding of `block` (`len` bytes once decoded), `None` if it fails.
fn decode(block: &[u8], len: usize, dict: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    // SAFETY: `out` has room for `len` bytes, all written on success.
    unsafe {
        crate::codec::decode::lz4_decode(block, len, out.as_mut_ptr(), dict.as_ptr(), dict.len())
            .ok()?;
        out.set_len(len);
    }
    Some(out)
}

fn check(index: &DictIndex, enc: &mut Encoder, src: &[u8], what: &str) -> usize {
    let mut out = vec![0xAB; 3]; // appends after existing bytes
    enc.compress(index, src, &mut out);
    let block = &out[3..];
    assert!(
        block.len() <= compress_bound(src.len()),
        "{what}: block over the bound"
    );
    let back = decode(block, src.len(), index.dictionary());
    assert!(
        back.as_deref() == Some(src),
        "{what}: {} bytes do not round-trip (block {} bytes)",
        src.len(),
        block.len()
    );
    block.len()
}

fn inputs(rng: &mut Rng, dict: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = vec![("empty".into(), Vec::new())];
    for n in 1..=20 {
        v.push((format!("random {n}"), rng.bytes(n)));
        v.push((format!("zeros {n}"), vec![0; n]));
        v.push((format!("text {n}"), text(rng, n)));
        if dict.len() >= n {
            let at = rng.below(dict.len() - n + 1);
            v.push((format!("dict slice {n}"), dict[at..at + n].to_vec()));
        }
    }
    for n in [21, 32, 63, 64, 100, 255, 256, 350, 1000, 2300, 4096, 10_000] {
        v.push((format!("random {n}"), rng.bytes(n)));
        v.push((format!("text {n}"), text(rng, n)));
        v.push((format!("zeros {n}"), vec![0; n]));
        v.push((
            format!("abc {n}"),
            b"abc".iter().cycle().take(n).copied().collect(),
        ));
        let runs: Vec<u8> = (0..n).map(|i| (i / 37) as u8).collect();
        v.push((format!("runs {n}"), runs));
    }
    // Dictionary material: slices, slices with mutations, pieces glued together, the whole
    // dictionary, its end followed by zeros (the history after the dictionary's end is the
    // document, not zero padding).
    if !dict.is_empty() {
        v.push(("whole dictionary".into(), dict.to_vec()));
        v.push(("dictionary twice".into(), [dict, dict].concat()));
        for _ in 0..40 {
            let n = 1 + rng.below(3000.min(dict.len()));
            let at = rng.below(dict.len() - n + 1);
            let mut s = dict[at..at + n].to_vec();
            for _ in 0..rng.below(8) {
                let i = rng.below(s.len());
                s[i] = rng.next() as u8;
            }
            v.push((format!("mutated dict slice {n}"), s));
        }
        for _ in 0..40 {
            let mut s = Vec::new();
            for _ in 0..1 + rng.below(20) {
                let n = 4 + rng.below(60);
                if dict.len() > n {
                    let at = rng.below(dict.len() - n);
                    s.extend_from_slice(&dict[at..at + n]);
                }
                let k = rng.below(6);
                s.extend(rng.bytes(k));
            }
            v.push(("dict pieces".into(), s));
        }
        for tail in [1usize, 4, 7, 8, 9, 15, 16, 17, 30] {
            let tail = tail.min(dict.len());
            let mut s = dict[dict.len() - tail..].to_vec();
            s.extend(vec![0u8; 40]);
            v.push((format!("dict end {tail} + zeros"), s.clone()));
            s.extend_from_slice(&dict[dict.len() - tail..]);
            s.extend(text(rng, 50));
            v.push((format!("dict end {tail} + zeros + dict end"), s));
        }
    }
    // Larger than 64 KiB: the window slides past the dictionary.
    v.push(("text 70000".into(), text(rng, 70_000)));
    v.push(("random 70000".into(), rng.bytes(70_000)));
    v.push(("zeros 200000".into(), vec![0; 200_000]));
    let mut mixed = text(rng, 100_000);
    mixed.extend(rng.bytes(10_000));
    mixed.extend_from_slice(&mixed.clone()[..50_000]);
    v.push(("mixed 160000".into(), mixed));
    v
}

fn run_all(seed: u64) {
    let mut rng = Rng(seed);
    let text_dict = text(&mut rng, 64 * 1024);
    let dicts: Vec<(&str, Vec<u8>)> = vec![
        ("text 64 KiB", text_dict.clone()),
        ("text 80 KiB (cut to 64)", text(&mut rng, 80 * 1024)),
        ("random 64 KiB", rng.bytes(64 * 1024)),
        ("zeros 64 KiB", vec![0; 64 * 1024]),
        ("text 1 KiB", text_dict[..1024].to_vec()),
        ("text 20 B", text_dict[..20].to_vec()),
        ("7 B", b"abcdefg".to_vec()),
        ("3 B", b"abc".to_vec()),
        ("empty", Vec::new()),
    ];
    let mut enc = Encoder::new();
    let mut blocks = 0;
    for (dname, dict) in &dicts {
        let index = DictIndex::new(dict);
        assert_eq!(
            index.dictionary(),
            &dict[dict.len().saturating_sub(65536)..]
        );
        for (what, src) in inputs(&mut rng, index.dictionary()) {
            check(&index, &mut enc, &src, &format!("dict {dname}, {what}"));
            blocks += 1;
        }
    }
    assert!(blocks > 1000);
}

#[test]
fn roundtrip_awkward_inputs() {
    run_all(0x9E37_79B9_7F4A_7C15);
}

#[test]
fn roundtrip_more_seeds() {
    for seed in 1..=3 {
        run_all(seed * 0x1234_5678_9ABC_DEF1);
    }
}

/// A text dictionary compresses text from the same vocabulary well (sanity: matches are found).
#[test]
fn dictionary_matches_are_used() {
    let mut rng = Rng(7);
    let dict = text(&mut rng, 64 * 1024);
    let index = DictIndex::new(&dict);
    let mut enc = Encoder::new();
    let src = dict[30_000..30_400].to_vec();
    let n = check(&index, &mut enc, &src, "dict copy");
    assert!(n < 20, "a 400-byte copy of the dictionary took {n} bytes");
}
