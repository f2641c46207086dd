use super::compress::*;
use super::decode::*;
use super::*;

fn text(i: usize) -> Vec<u8> {
    format!(
        "document {i}: the quick brown fox jumps over the lazy dog near river bank {}",
        i * 7
    )
    .into_bytes()
}

#[test]
fn round_trips_at_every_level_with_and_without_dictionary() {
    let docs: Vec<Vec<u8>> = (0..500).map(text).collect();
    let dict = dictionary_for(docs.iter().map(Vec::as_slice), 4096);
    assert!(!dict.is_empty());
    for level in [0, 1, 4, 9, 12] {
        for d in [&dict[..], &[][..]] {
            let c = Compressor::new(level, d).unwrap();
            for doc in &docs {
                let mut blob = Vec::new();
                c.compress(doc, &mut blob);
                assert_eq!(&*decompress(&blob, c.dictionary()).unwrap(), &doc[..]);
            }
        }
    }
}

#[test]
fn dictionary_stays_within_its_size_and_a_quarter_of_the_sample() {
    let short: Vec<Vec<u8>> = (0..100_000)
        .map(|i| format!("doc {i} short").into_bytes())
        .collect();
    let long: Vec<Vec<u8>> = (0..500).map(|i| text(i).repeat(40)).collect();
    for records in [&short, &long] {
        let dict = dictionary_for(records.iter().map(Vec::as_slice), MAX_DICT_SIZE);
        assert!(!dict.is_empty() && dict.len() <= MAX_DICT_SIZE);
        let few = dictionary_for(records[..10].iter().map(Vec::as_slice), MAX_DICT_SIZE);
        let total: usize = records[..10].iter().map(Vec::len).sum();
        assert!(few.len() <= total / 4, "{} of {total}", few.len());
    }
    assert_eq!(
        dictionary_for([b"tiny".as_slice()].into_iter(), MAX_DICT_SIZE),
        b"t"
    );
    // Training reads the first MAX_TRAINING_BYTES only, cutting the record that crosses it.
    let huge = vec![b'x'; MAX_TRAINING_BYTES + 1000];
    let first = dictionary_for([&huge[..]].into_iter(), MAX_DICT_SIZE);
    let cut = dictionary_for([&huge[..MAX_TRAINING_BYTES]].into_iter(), MAX_DICT_SIZE);
    assert_eq!(first, cut);
}

#[test]
fn dictionary_shrinks_short_documents() {
    let docs: Vec<Vec<u8>> = (0..2000).map(text).collect();
    let raw: usize = docs.iter().map(Vec::len).sum();
    let size = |dict: &[u8]| compressed_size(&docs, 9, dict);
    let dict = dictionary_for(docs.iter().map(Vec::as_slice), MAX_DICT_SIZE);
    let (plain, with_dict) = (size(&[]), size(&dict));
    assert!(
        with_dict * 2 < plain,
        "dict {with_dict} vs plain {plain} of raw {raw}"
    );
}

#[test]
fn incompressible_and_empty_records_are_stored_raw() {
    let c = Compressor::new(9, b"").unwrap();
    for raw in [vec![], (0..=255u8).collect::<Vec<_>>()] {
        let mut blob = Vec::new();
        c.compress(&raw, &mut blob);
        assert_eq!(blob[0] & 1, 0);
        assert_eq!(&*decompress(&blob, b"").unwrap(), &raw[..]);
    }
}

#[test]
fn corrupt_blobs_are_errors_not_crashes() {
    let c = Compressor::new(9, b"").unwrap();
    let mut blob = Vec::new();
    c.compress(&text(1).repeat(20), &mut blob);
    for cut in 0..blob.len() {
        let _ = decompress(&blob[..cut], b"");
    }
    for i in 0..blob.len() {
        let mut bad = blob.clone();
        bad[i] ^= 0x5a;
        let _ = decompress(&bad, b"");
    }
    assert!(decompress(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0], b"").is_err());
    assert!(Compressor::new(13, b"").is_err());
    assert!(Compressor::new(LEVEL_NONE - 1, b"").is_err());
}

/// A compressed blob of `payload` that claims `raw_len` bytes.
fn claiming(raw_len: u64, payload: &[u8]) -> Vec<u8> {
    let mut blob = Vec::new();
    varint::put(&mut blob, raw_len << 1 | 1);
    blob.extend_from_slice(payload);
    blob
}

#[test]
fn claimed_lengths_are_bounded_by_what_the_payload_holds() {
    // About the densest block there is: one match whose length takes every byte but its
    // token and offset, then the 5 literals lz4 ends a block with; behind a 1-byte dictionary.
    let mut densest = vec![0x0f, 1, 0];
    densest.extend(std::iter::repeat_n(255, 5000));
    densest.extend([254, 0x50, b'a', b'b', b'c', b'd', b'e']);
    let most = block_len(&densest).unwrap();
    assert_eq!(most, 4 + 15 + 255 * 5000 + 254 + 5);
    assert!(most <= densest.len() as u64 * MAX_EXPANSION);
    let blob = claiming(most, &densest);
    assert_eq!(decompress(&blob, b"x").unwrap().len() as u64, most);
    // More than MAX_EXPANSION times the payload: refused before anything is allocated.
    let too_much = claiming(densest.len() as u64 * MAX_EXPANSION + 1, &densest);
    let err = decompress(&too_much, b"x").unwrap_err();
    assert!(err.to_string().contains("more than its"), "{err}");
    // Within it, but not what the sequences add up to: refused before allocating too.
    for claim in [most - 1, most + 1, MAX_INPUT as u64] {
        let payload = if claim == MAX_INPUT as u64 {
            vec![0; MAX_INPUT / 255 + 1]
        } else {
            densest.clone()
        };
        let err = decompress(&claiming(claim, &payload), b"x").unwrap_err();
        assert!(err.to_string().contains("does not hold"), "{claim}: {err}");
    }
    // Genuine records over SCAN_CLAIMS_OVER, at both encoders: their sequences add up, and
    // every cut of their blocks is refused.
    let big = text(3).repeat(SCAN_CLAIMS_OVER / text(3).len() + 100);
    for level in [0, 9] {
        let c = Compressor::new(level, b"").unwrap();
        let mut blob = Vec::new();
        c.compress(&big, &mut blob);
        let Ok(Blob::Compressed { payload, raw_len }) = parse(&blob) else {
            panic!("a compressed blob")
        };
        assert_eq!(block_len(payload), Some(raw_len as u64));
        assert_eq!(&*decompress(&blob, b"").unwrap(), &big[..]);
        for cut in [1, 2, 3, 100, payload.len() / 2] {
            assert!(decompress(&blob[..blob.len() - cut], b"").is_err());
        }
    }
}

#[test]
fn decoding_behind_the_dictionary_matches_plain_decoding() {
    let docs: Vec<Vec<u8>> = (0..200).map(text).collect();
    let dicts = [
        dictionary_for(docs[..100].iter().map(Vec::as_slice), 4096),
        dictionary_for(docs[100..].iter().map(Vec::as_slice), 8192),
    ];
    let compressors: Vec<Compressor> = dicts
        .iter()
        .map(|d| Compressor::new(ENCODER_LEVEL, d).unwrap())
        .collect();
    // Alternate dictionaries (the thread's copy is replaced), nest a decode inside another
    // (it gets its own buffer), and decode one document larger than the buffer keeps.
    for (i, doc) in docs.iter().enumerate() {
        let c = &compressors[i % 2];
        let (dict, id) = (c.dictionary(), xxh3_64(c.dictionary()));
        let mut blob = Vec::new();
        c.compress(doc, &mut blob);
        let got = decompress_with(&blob, dict, id, |raw| {
            let inner = decompress_with(&blob, dict, id, <[u8]>::to_vec).unwrap();
            assert_eq!(inner, raw);
            raw.to_vec()
        });
        assert_eq!(got.unwrap(), &doc[..]);
    }
    let huge = text(7).repeat((KEEP_DECODE_BYTES / text(7).len()) + 2);
    let fast = Compressor::new(0, &dicts[0]).unwrap();
    let mut blob = Vec::new();
    fast.compress(&huge, &mut blob);
    let id = xxh3_64(&dicts[0]);
    assert!(decompress_with(&blob, &dicts[0], id, |raw| raw == &huge[..]).unwrap());
    // The room it needed is given back at once, not kept until some later decode.
    DECODE.with(|cell| {
        let capacity = cell
            .borrow()
            .kept
            .iter()
            .map(|k| k.buf.capacity())
            .max()
            .unwrap_or(0);
        assert!(capacity < dicts[0].len() + KEEP_DECODE_BYTES, "{capacity}");
    });
}

#[test]
fn more_dictionaries_than_a_thread_keeps_decode_right_and_keep_little_room() {
    // Past KEPT_DICTIONARIES the least recently used copy goes; a copy switched away from
    // gives back what a large document made it grow by.
    let n = KEPT_DICTIONARIES + 6;
    let dicts: Vec<Vec<u8>> = (0..n)
        .map(|k| {
            dictionary_for(
                (0..20)
                    .map(|i| text(k * 20 + i))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(Vec::as_slice),
                2048,
            )
        })
        .collect();
    let doc = |k: usize| text(k % 40);
    let blob = |k: usize, doc: &[u8]| {
        let mut blob = Vec::new();
        Compressor::new(3, &dicts[k])
            .unwrap()
            .compress(doc, &mut blob);
        blob
    };
    let order = (0..n)
        .chain((0..n).rev())
        .chain((0..3 * n).map(|i| (i * 7) % n));
    for k in order.flat_map(|k| [k, k]) {
        let dict = &dicts[k];
        let got = decompress_with(&blob(k, &doc(k)), dict, xxh3_64(dict), <[u8]>::to_vec);
        assert_eq!(got.unwrap(), doc(k), "dictionary {k}");
    }
    let large = text(3).repeat((4 * KEEP_ROOM_PER_DICTIONARY) / text(3).len());
    for k in [0, 1] {
        let (dict, large_blob) = (&dicts[k], blob(k, &large));
        let got = decompress_with(&large_blob, dict, xxh3_64(dict), |raw| raw == &large[..]);
        assert!(got.unwrap());
    }
    DECODE.with(|cell| {
        let state = cell.borrow();
        assert!(state.kept.len() <= KEPT_DICTIONARIES);
        let first = state
            .kept
            .iter()
            .find(|k| k.id == xxh3_64(&dicts[0]) ^ (dicts[0].len() as u64).rotate_left(32));
        let first = first.expect("dictionary 0 was used second to last: it is kept");
        assert!(first.buf.capacity() <= dicts[0].len() + KEEP_ROOM_PER_DICTIONARY);
    });
}

#[test]
fn documents_of_alternating_dictionaries_decode_right() {
    // A collection reads shards with their own dictionaries in any order: decoded against a
    // dictionary where it lies, or behind the thread's copy of it, the bytes are the same.
    let docs: Vec<Vec<u8>> = (0..60).map(text).collect();
    let dicts: Vec<Vec<u8>> = (0..3)
        .map(|k| dictionary_for(docs[k * 20..k * 20 + 20].iter().map(Vec::as_slice), 4096))
        .collect();
    let blobs: Vec<Vec<u8>> = (docs.iter().enumerate())
        .map(|(i, doc)| {
            let mut blob = Vec::new();
            Compressor::new(3, &dicts[i % 3])
                .unwrap()
                .compress(doc, &mut blob);
            blob
        })
        .collect();
    let order = (0..60).chain((0..60).flat_map(|i| [i, i, (i * 7) % 60]));
    for i in order {
        let dict = &dicts[i % 3];
        let got = decompress_with(&blobs[i], dict, xxh3_64(dict), <[u8]>::to_vec).unwrap();
        assert_eq!(got, docs[i], "document {i}");
    }
}

#[test]
fn level_none_stores_records_as_they_are_and_ignores_the_dictionary() {
    let docs: Vec<Vec<u8>> = (0..50).map(text).collect();
    let dict = dictionary_for(docs.iter().map(Vec::as_slice), 4096);
    let c = Compressor::new(LEVEL_NONE, &dict).unwrap();
    assert!(c.dictionary().is_empty());
    for doc in docs.iter().chain([&Vec::new()]) {
        let mut blob = Vec::new();
        c.compress(doc, &mut blob);
        let mut want = Vec::new();
        varint::put(&mut want, (doc.len() as u64) << 1);
        want.extend_from_slice(doc);
        assert_eq!(blob, want);
        // Read in place: no copy, no decoding.
        assert!(matches!(decompress(&blob, b""), Ok(Cow::Borrowed(raw)) if raw == &doc[..]));
    }
}
