//! Text columns laid out as Arrow lays them (offsets into one data buffer), for
//! `Writer._add_text_columns`: read without a Python object per value, and every row checked as
//! `Writer.add` would check it before any is added.

use docstore_core::repeats::first_repeat;
use numpy::PyReadonlyArray1;

/// What `Writer::add` would reject in text columns: ids that are empty, not UTF-8 or repeated
/// within the batch, `str` values that are not UTF-8. The first problem in row order is reported.
pub(crate) fn check_text_rows(
    ids: &TextColumn<'_>,
    columns: &[TextColumn<'_>],
    kinds: &[(bool, String)],
) -> docstore_core::Result<()> {
    let mut keys = Vec::with_capacity(ids.len());
    let mut check_row = |row: usize| -> docstore_core::Result<()> {
        let key = ids.str(row, "doc id")?;
        if key.is_empty() {
            return Err(docstore_core::Error::InvalidKey(format!(
                "the doc id of row {row} is empty"
            )));
        }
        keys.push(key);
        for ((is_str, name), column) in kinds.iter().zip(columns) {
            if *is_str {
                column.str(row, name)?;
            }
        }
        Ok(())
    };
    let checked = (0..ids.len()).try_for_each(&mut check_row);
    // Repeats among the rows before a bad one (and its id) come first in row order.
    match first_repeat(&keys) {
        Some(row) => Err(docstore_core::Error::DuplicateKey(keys[row].to_owned())),
        None => checked,
    }
}

/// A column of strings as Arrow lays them out: `offsets[i]..offsets[i + 1]` in `data`.
pub(crate) struct TextColumn<'a> {
    offsets: &'a [i64],
    data: &'a [u8],
}

impl<'a> TextColumn<'a> {
    pub(crate) fn new(
        offsets: &'a PyReadonlyArray1<'_, i64>,
        data: &'a PyReadonlyArray1<'_, u8>,
    ) -> Result<Self, String> {
        let (Ok(offsets), Ok(data)) = (offsets.as_slice(), data.as_slice()) else {
            return Err("offsets and data must be contiguous arrays".into());
        };
        let valid = !offsets.is_empty()
            && offsets[0] >= 0
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets[offsets.len() - 1] as u64 <= data.len() as u64;
        if !valid {
            return Err("offsets must be non-decreasing and within the data".into());
        }
        Ok(TextColumn { offsets, data })
    }

    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub(crate) fn get(&self, row: usize) -> &'a [u8] {
        &self.data[self.offsets[row] as usize..self.offsets[row + 1] as usize]
    }

    /// # Safety
    /// Row `row` must be valid UTF-8 (`str` said so).
    pub(crate) unsafe fn str_unchecked(&self, row: usize) -> &'a str {
        // SAFETY: the caller's promise.
        unsafe { std::str::from_utf8_unchecked(self.get(row)) }
    }

    fn str(&self, row: usize, what: &str) -> docstore_core::Result<&'a str> {
        std::str::from_utf8(self.get(row)).map_err(|_| {
            docstore_core::Error::Schema(format!("{what} of row {row} is not valid UTF-8"))
        })
    }
}
