//! The user metadata section (section 9, format v5, docs/format.md §4.10): one JSON object, UTF-8,
//! that a store's writer was given (`Writer(..., metadata={...})`), for its users to read back
//! (`DocStore.metadata`): the Hugging Face features a store was built from, a tokenizer's name.
//! docstore itself reads nothing in it. Written only when given, so a store without metadata is
//! byte for byte the version 3 or 4 store it was before.
//!
//! The section is checked whole at open, as the schema is: at most `MAX_METADATA_BYTES`, valid
//! UTF-8, one JSON value (RFC 8259) that is an object, no member name repeated in any object
//! (a reader would otherwise pick one of two values as its JSON parser does), nothing after it
//! but JSON whitespace.

use crate::error::{Error, Result};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// The longest metadata section: `open()` reads and parses it whole, so its cost is bounded
/// for any file (4 MiB of JSON parse in a few ms). Features of ImageNet-21k's 21,841 class names
/// take about 0.6 MiB.
pub const MAX_METADATA_BYTES: usize = 4 << 20;

/// How deep objects and arrays may nest, the outermost object counting as 1: serde_json's
/// recursion limit (128 levels below the value read, the outer object one of them), which keeps
/// a crafted section from overflowing the stack.
pub const MAX_DEPTH: usize = 127;

/// Checks `bytes` as a metadata section (as `open()` does) and returns them as text.
pub fn check(bytes: &[u8]) -> Result<&str> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::corrupt("bad metadata: not UTF-8"))?;
    validate(text).map_err(|why| Error::corrupt(format!("bad metadata: {why}")))?;
    Ok(text)
}

/// Checks metadata a writer is given: what `check` requires of the section, with an error that
/// names what is wrong (`Error::InvalidArgument`).
pub fn check_given(text: &str) -> Result<()> {
    if text.len() > MAX_METADATA_BYTES {
        return Err(Error::InvalidArgument(format!(
            "metadata is {} bytes of JSON, more than a store holds ({MAX_METADATA_BYTES})",
            text.len()
        )));
    }
    validate(text).map_err(|why| Error::InvalidArgument(format!("metadata: {why}")))
}

/// Why `text` is not one JSON object without repeated member names, if it is not.
fn validate(text: &str) -> std::result::Result<(), String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Strict::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    match value {
        Strict::Object => Ok(()),
        Strict::Other => Err("not a JSON object".into()),
    }
}

/// A JSON value read for its shape only: whether it is an object, every object's member names
/// checked unique on the way (serde_json's own map keeps the last of repeated names silently).
enum Strict {
    Object,
    Other,
}

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Strict, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<Strict, E> {
        Ok(Strict::Other)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<Strict, E> {
        Ok(Strict::Other)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<Strict, E> {
        Ok(Strict::Other)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<Strict, E> {
        Ok(Strict::Other)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<Strict, E> {
        Ok(Strict::Other)
    }
    fn visit_unit<E>(self) -> std::result::Result<Strict, E> {
        Ok(Strict::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Strict, A::Error> {
        let mut names = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if !names.insert(name.clone()) {
                return Err(de::Error::custom(format!(
                    "member name {name:?} repeated in an object"
                )));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict::Object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_pass_and_everything_else_is_named() {
        for good in [
            "{}",
            " {\"a\": 1} \n",
            r#"{"huggingface": {"features": {"label": {"names": ["a", "b"]}}}, "a": [1, {"b": null}]}"#,
            r#"{"a": {"x": 1}, "b": {"x": 2}}"#,
        ] {
            assert!(check(good.as_bytes()).is_ok(), "{good}");
            assert!(check_given(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("", "EOF"),
            ("[]", "not a JSON object"),
            ("1", "not a JSON object"),
            ("{\"a\": 1", "EOF"),
            ("{\"a\": 1}{}", "trailing"),
            ("{\"a\": 1, \"a\": 2}", "repeated"),
            ("{\"b\": {\"a\": 1, \"a\": 2}}", "repeated"),
            ("{\"a\": NaN}", "expected value"),
        ] {
            let err = check(bad.as_bytes()).unwrap_err().to_string();
            assert!(
                err.contains("bad metadata") && err.contains(why),
                "{bad}: {err}"
            );
            let err = check_given(bad).unwrap_err().to_string();
            assert!(
                err.contains("metadata") && err.contains(why),
                "{bad}: {err}"
            );
        }
        assert!(check(b"{\"a\": \"\xff\"}")
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
        let long = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_METADATA_BYTES));
        assert!(check_given(&long)
            .unwrap_err()
            .to_string()
            .contains("more than"));
        // Nested at most MAX_DEPTH deep (serde_json's limit), the outer object counting.
        let at = |depth: usize| {
            let inner = depth - 1;
            format!("{{\"a\": {}{}}}", "[".repeat(inner), "]".repeat(inner))
        };
        let first_bad = (2..200).find(|&d| check(at(d).as_bytes()).is_err());
        assert_eq!(first_bad, Some(MAX_DEPTH + 1));
        assert!(check(at(MAX_DEPTH).as_bytes()).is_ok());
        let err = check(at(MAX_DEPTH + 1).as_bytes()).unwrap_err().to_string();
        assert!(err.contains("recursion limit"), "{err}");
    }
}
