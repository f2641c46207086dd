//! What a writer is asked to write: the compression level and dictionary, the batch and key
//! buffer sizes, the format version, and whether it may replace a store (`WriterOptions`),
//! checked once, before any file exists (`validate`).

use crate::codec::{self, Compressor};
use crate::error::{Error, Result};
use crate::format;

/// The largest `WriterOptions::batch_bytes`: a writer allocates a batch of that size up front.
pub const MAX_BATCH_BYTES: usize = 1 << 30;

#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// 0 = lz4 fast, 1..=12 = lz4 HC levels, `codec::LEVEL_NONE` (-1) = stored uncompressed.
    pub level: i32,
    /// Bytes of dictionary trained on the first batch (0 disables it; at most 64 KiB).
    pub dict_size: usize,
    /// Raw bytes per compression batch (the dictionary is trained on the first one). A writer
    /// holds up to five: the one being filled, two queued, the one being compressed, and the one
    /// before it, compressed, being written.
    pub batch_bytes: usize,
    /// Memory for keys before a sorted run is spilled to disk.
    pub key_buffer_bytes: usize,
    pub overwrite: bool,
    /// The newest version the writer may write, `format::NEWEST` down to `format::MIN_VERSION`,
    /// for older readers. It writes version 5 only for a store given `metadata`, version 4 only
    /// for a schema that needs it (`Schema::min_version`), `format::VERSION` (3) otherwise.
    pub format_version: u32,
    /// A dictionary to use instead of training one (at most 64 KiB): the shards of one corpus
    /// share the one trained once, so that their reader keeps one copy and a sharded build
    /// trains once, not once per shard.
    pub dictionary: Option<Vec<u8>>,
    /// The user metadata section (format v5): one JSON object, as text (`format::metadata`).
    /// None (the default) writes no section, and the store as before.
    pub metadata: Option<String>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            // HC level 3 with the trained dictionary: English news at 0.49 of raw (<= 0.5 is the
            // target); level 4 is ~2.5% smaller, level 9 ~4%, at ~0.85x and ~0.4x the build
            // speed (`benches/levels.py`).
            level: 3,
            dict_size: codec::MAX_DICT_SIZE,
            batch_bytes: 4 << 20,
            key_buffer_bytes: 64 << 20,
            overwrite: false,
            format_version: format::NEWEST,
            dictionary: None,
            metadata: None,
        }
    }
}

impl WriterOptions {
    /// Checks the options as `Writer::create` does before it creates any file: the level, the
    /// batch size, the format version and the dictionary's size.
    pub fn validate(&self) -> Result<()> {
        Compressor::new(self.level, &[])?;
        if self.batch_bytes > MAX_BATCH_BYTES {
            return Err(Error::InvalidArgument(format!(
                "batch_bytes must be at most {MAX_BATCH_BYTES} (a writer holds five batches), got {}",
                self.batch_bytes
            )));
        }
        if !(format::MIN_VERSION..=format::NEWEST).contains(&self.format_version) {
            return Err(Error::InvalidArgument(format!(
                "format_version must be {} to {}, got {}",
                format::MIN_VERSION,
                format::NEWEST,
                self.format_version
            )));
        }
        if self
            .dictionary
            .as_ref()
            .is_some_and(|d| d.len() > codec::MAX_DICT_SIZE)
        {
            return Err(Error::InvalidArgument(format!(
                "a dictionary is at most {} bytes (all lz4 can reach back)",
                codec::MAX_DICT_SIZE
            )));
        }
        if let Some(metadata) = &self.metadata {
            format::metadata::check_given(metadata)?;
            if self.format_version < format::METADATA_VERSION {
                return Err(Error::InvalidArgument(format!(
                    "metadata needs format version {} (format_version={} cannot hold it)",
                    format::METADATA_VERSION,
                    self.format_version
                )));
            }
        }
        if self.dict_size > codec::MAX_DICT_SIZE {
            return Err(Error::InvalidArgument(format!(
                "dict_size must be 0 (no dictionary) to {} bytes (all lz4 can reach back), got {}",
                codec::MAX_DICT_SIZE,
                self.dict_size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::WriterOptions;

    #[test]
    fn validate_refuses_each_bad_option_and_creates_nothing() {
        assert!(WriterOptions::default().validate().is_ok());
        let dir = tempfile::tempdir().unwrap();
        let bad = [
            WriterOptions {
                level: 13,
                ..Default::default()
            },
            WriterOptions {
                batch_bytes: super::MAX_BATCH_BYTES + 1,
                ..Default::default()
            },
            WriterOptions {
                format_version: 0,
                ..Default::default()
            },
            WriterOptions {
                dict_size: (64 << 10) + 1,
                ..Default::default()
            },
            WriterOptions {
                dictionary: Some(vec![0; (64 << 10) + 1]),
                ..Default::default()
            },
        ];
        for options in bad {
            let message = options.validate().unwrap_err().to_string();
            let schema = crate::Schema::new(vec![]).unwrap();
            let target = dir.path().join("store");
            let created = crate::Writer::create(&target, schema, options)
                .err()
                .unwrap();
            // `Writer::create` refuses them with the same error, before any file exists.
            assert_eq!(created.to_string(), message);
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }
}
