//! Documents given column by column, laid out as Arrow lays its arrays out (a pyarrow table given
//! to `add_many`): each column borrowed as buffers, the whole batch checked before any row is
//! added, then each row handed to `Writer::add` as `Value`s, so that a store built from columns
//! is encoded by the same code, byte for byte, as one built document by document.

use crate::error::{Error, Result};
use crate::format::record::Value;
use crate::format::schema::{ElemType, FieldType, Schema};
use crate::repeats::first_repeat;

/// One column of values, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum Column<'a> {
    /// `str` or `bytes` values (and doc ids): row `i` is `data[offsets[i]..offsets[i + 1]]`.
    Text {
        offsets: &'a [i64],
        data: &'a [u8],
    },
    Int64(&'a [i64]),
    Float64(&'a [f64]),
    /// Arrays: row `i` is elements `offsets[i]..offsets[i + 1]` of `values`, little-endian
    /// `elem`s (Arrow's list layout, offsets counting elements, not bytes).
    Array {
        elem: ElemType,
        offsets: &'a [i64],
        values: &'a [u8],
    },
    /// `bool` values, one byte each (0 or 1; numpy's bool layout).
    Bool(&'a [u8]),
    /// `list[str]` or `list[bytes]` values: row `i` is items `offsets[i]..offsets[i + 1]`, item
    /// `j` being `data[item_offsets[j]..item_offsets[j + 1]]` (Arrow's list of strings).
    List {
        offsets: &'a [i64],
        item_offsets: &'a [i64],
        data: &'a [u8],
    },
}

/// Whether `offsets` are non-empty, non-negative, non-decreasing and end within `available`
/// units of `size` bytes.
fn offsets_valid(offsets: &[i64], size: usize, available: usize) -> bool {
    !offsets.is_empty()
        && offsets[0] >= 0
        && offsets.windows(2).all(|w| w[0] <= w[1])
        && (offsets[offsets.len() - 1] as u64)
            .checked_mul(size as u64)
            .is_some_and(|end| end <= available as u64)
}

impl<'a> Column<'a> {
    /// Rows in the column (0 for offsets that `check_layout` would refuse as empty).
    pub fn len(&self) -> usize {
        match self {
            Column::Text { offsets, .. }
            | Column::Array { offsets, .. }
            | Column::List { offsets, .. } => offsets.len().saturating_sub(1),
            Column::Int64(values) => values.len(),
            Column::Bool(values) => values.len(),
            Column::Float64(values) => values.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What is wrong with the layout of the buffers, if anything: offsets must be non-empty,
    /// non-negative, non-decreasing and within the data.
    fn check_layout(&self) -> std::result::Result<(), String> {
        let (offsets, size, available) = match *self {
            Column::Text { offsets, data } => (offsets, 1, data.len()),
            Column::Array {
                elem,
                offsets,
                values,
            } => (offsets, elem.size(), values.len()),
            Column::List {
                offsets,
                item_offsets,
                data,
            } => {
                if !offsets_valid(item_offsets, 1, data.len()) {
                    return Err("item offsets must be non-decreasing and within the data".into());
                }
                (offsets, 1, item_offsets.len() - 1)
            }
            Column::Int64(_) | Column::Float64(_) | Column::Bool(_) => return Ok(()),
        };
        if !offsets_valid(offsets, size, available) {
            return Err("offsets must be non-decreasing and within the data".into());
        }
        Ok(())
    }

    fn bytes(offsets: &[i64], data: &'a [u8], row: usize, size: usize) -> &'a [u8] {
        &data[offsets[row] as usize * size..offsets[row + 1] as usize * size]
    }

    /// Row `row` as UTF-8, or an error naming `what` and the row.
    fn str(offsets: &[i64], data: &'a [u8], row: usize, what: &str) -> Result<&'a str> {
        std::str::from_utf8(Self::bytes(offsets, data, row, 1))
            .map_err(|_| Error::Schema(format!("{what} of row {row} is not valid UTF-8")))
    }

    /// The kind of column, as an error message names it.
    fn kind(&self) -> String {
        match self {
            Column::Text { .. } => "text".into(),
            Column::Int64(_) => "int64".into(),
            Column::Float64(_) => "float64".into(),
            Column::Array { elem, .. } => format!("{}[]", elem.name()),
            Column::Bool(_) => "bool".into(),
            Column::List { .. } => "list".into(),
        }
    }

    /// Whether the column holds values of `ty`.
    fn holds(&self, ty: FieldType) -> bool {
        match (self, ty) {
            (Column::Text { .. }, FieldType::Str | FieldType::Bytes) => true,
            (Column::Int64(_), FieldType::Int64) => true,
            (Column::Float64(_), FieldType::Float64) => true,
            (Column::Array { elem, .. }, FieldType::Array(want) | FieldType::Tensor(want, _)) => {
                *elem == want
            }
            (Column::Bool(_), FieldType::Bool) => true,
            (Column::List { .. }, FieldType::StrList | FieldType::BytesList) => true,
            _ => false,
        }
    }
}

/// A batch of documents as columns: their ids and one column per field of a schema, every row
/// checked as `Writer::add` would check it (ids non-empty, UTF-8 and distinct, `str` values
/// UTF-8), all before any is added, so that a bad row leaves the writer as it was.
pub struct Columns<'a> {
    /// Offsets and data of the doc ids, every one checked to be non-empty UTF-8.
    id_offsets: &'a [i64],
    id_data: &'a [u8],
    columns: Vec<Column<'a>>,
    /// Whether each column is a `str` field's (checked to be UTF-8).
    is_str: Vec<bool>,
    /// Per column, the validity of its rows (one byte each, 0 = null) for a nullable field
    /// given one; None: every row has a value.
    valid: Vec<Option<&'a [u8]>>,
}

impl<'a> Columns<'a> {
    /// Checks `ids` and `columns` (one per field of `schema`, in its order) and every row of them.
    /// A column of the wrong kind, length or layout is a `Schema` error; of the rows, the first
    /// problem in row order is reported (a repeated id before a bad value of a later row).
    pub fn new(schema: &Schema, ids: Column<'a>, columns: Vec<Column<'a>>) -> Result<Self> {
        let valid = vec![None; columns.len()];
        Self::with_nulls(schema, ids, columns, valid)
    }

    /// `new`, with the validity of each column's rows (one byte a row, 0 for a null, Arrow's
    /// validity bitmap unpacked) where it has nulls: a null row of a nullable field is `None`
    /// whatever its slot in the column holds; one of a field that is not nullable is refused,
    /// naming the field and the document.
    pub fn with_nulls(
        schema: &Schema,
        ids: Column<'a>,
        columns: Vec<Column<'a>>,
        valid: Vec<Option<&'a [u8]>>,
    ) -> Result<Self> {
        if columns.len() != schema.len() || valid.len() != schema.len() {
            return Err(Error::Schema("one column per field is needed".into()));
        }
        let Column::Text {
            offsets: id_offsets,
            data: id_data,
        } = ids
        else {
            return Err(Error::Schema(format!(
                "doc ids must be a text column, not {}",
                ids.kind()
            )));
        };
        ids.check_layout()
            .map_err(|e| Error::Schema(format!("doc ids: {e}")))?;
        for (field, column) in schema.fields.iter().zip(&columns) {
            if !column.holds(field.ty) {
                return Err(Error::Schema(format!(
                    "field {:?} is {}, given a {} column",
                    field.name,
                    field.ty,
                    column.kind()
                )));
            }
            column
                .check_layout()
                .map_err(|e| Error::Schema(format!("field {:?}: {e}", field.name)))?;
            if column.len() != ids.len() {
                return Err(Error::Schema(format!(
                    "columns have {} values for {} doc ids",
                    column.len(),
                    ids.len()
                )));
            }
        }
        for (field, valid) in schema.fields.iter().zip(&valid) {
            if valid.is_some_and(|v| v.len() != ids.len()) {
                return Err(Error::Schema(format!(
                    "field {:?}: the validity of {} rows is given for {} doc ids",
                    field.name,
                    valid.map_or(0, <[u8]>::len),
                    ids.len()
                )));
            }
        }
        let is_str = schema
            .fields
            .iter()
            .map(|f| f.ty == FieldType::Str)
            .collect();
        let batch = Columns {
            id_offsets,
            id_data,
            columns,
            is_str,
            valid,
        };
        batch.check_rows(schema)?;
        Ok(batch)
    }

    /// What `Writer::add` would reject: ids that are empty, too long, not UTF-8 or repeated within
    /// the batch, `str` values that are not UTF-8. The first problem in row order is reported.
    fn check_rows(&self, schema: &Schema) -> Result<()> {
        let mut keys = Vec::with_capacity(self.len());
        let mut check_row = |row: usize| -> Result<()> {
            let key = Column::str(self.id_offsets, self.id_data, row, "doc id")?;
            if key.is_empty() {
                return Err(Error::InvalidKey(format!(
                    "the doc id of row {row} is empty"
                )));
            }
            if key.len() > u32::MAX as usize {
                return Err(Error::InvalidKey("doc ids are at most 4 GiB long".into()));
            }
            keys.push(key);
            for (i, field) in schema.fields.iter().enumerate() {
                if self.is_null(i, row) {
                    if !field.nullable {
                        return Err(Error::FieldType(format!(
                            "doc {key:?}: field {:?} is {}, got None (null); declare it {}? \
                             to store None",
                            field.name, field.ty, field.ty
                        )));
                    }
                    continue; // whatever its slot holds is not a value
                }
                match self.columns[i] {
                    Column::Text { offsets, data } if self.is_str[i] => {
                        Column::str(offsets, data, row, &field.name)?;
                    }
                    Column::Array { offsets, .. } => {
                        if let FieldType::Tensor(_, shape) = field.ty {
                            let count = (offsets[row + 1] - offsets[row]) as usize;
                            if count != shape.elements() {
                                return Err(Error::FieldType(format!(
                                    "doc {key:?}: field {:?} is {}, got {count} elements (its \
                                     shape holds {})",
                                    field.name,
                                    field.ty,
                                    shape.elements()
                                )));
                            }
                        }
                    }
                    Column::Bool(values) if values[row] > 1 => {
                        return Err(Error::FieldType(format!(
                            "doc {key:?}: field {:?} is bool, got the byte {}",
                            field.name, values[row]
                        )));
                    }
                    Column::List {
                        offsets,
                        item_offsets,
                        data,
                    } if field.ty == FieldType::StrList => {
                        let (from, to) = (offsets[row] as usize, offsets[row + 1] as usize);
                        for j in from..to {
                            Column::str(item_offsets, data, j, &field.name).map_err(|_| {
                                Error::FieldType(format!(
                                    "doc {key:?}: field {:?}: item {} of its list is not valid \
                                     UTF-8",
                                    field.name,
                                    j - from
                                ))
                            })?;
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        let checked = (0..self.len()).try_for_each(&mut check_row);
        // Repeats among the rows before a bad one (and its id) come first in row order.
        match first_repeat(&keys) {
            Some(row) => Err(Error::DuplicateKey(keys[row].to_owned())),
            None => checked,
        }
    }

    /// Documents in the batch.
    pub fn len(&self) -> usize {
        self.id_offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The doc id of row `row`.
    pub fn key(&self, row: usize) -> &'a str {
        let bytes = Column::bytes(self.id_offsets, self.id_data, row, 1);
        // SAFETY: every id was checked to be UTF-8 by `new`, the only maker of `Columns`, and
        // the buffers are borrowed immutably for 'a.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// Whether row `row` of column `column` is null.
    fn is_null(&self, column: usize, row: usize) -> bool {
        self.valid[column].is_some_and(|valid| valid[row] == 0)
    }

    /// Appends the field values of row `row`, in schema order, to `out`.
    pub fn values(&self, row: usize, out: &mut Vec<Value<'a>>) {
        for (i, (column, &is_str)) in self.columns.iter().zip(&self.is_str).enumerate() {
            if self.is_null(i, row) {
                out.push(Value::Null);
                continue;
            }
            out.push(match *column {
                Column::Text { offsets, data } => {
                    let bytes = Column::bytes(offsets, data, row, 1);
                    if is_str {
                        // SAFETY: the values of `str` fields were checked to be UTF-8 by `new`,
                        // and the buffers are borrowed immutably for 'a.
                        Value::Str(unsafe { std::str::from_utf8_unchecked(bytes) })
                    } else {
                        Value::Bytes(bytes)
                    }
                }
                Column::Int64(values) => Value::Int64(values[row]),
                Column::Float64(values) => Value::Float64(values[row]),
                Column::Array {
                    elem,
                    offsets,
                    values,
                } => Value::Array(elem, Column::bytes(offsets, values, row, elem.size())),
                Column::Bool(values) => Value::Bool(values[row] != 0),
                Column::List {
                    offsets,
                    item_offsets,
                    data,
                } => Value::Items {
                    offsets: &item_offsets[offsets[row] as usize..=offsets[row + 1] as usize],
                    data,
                },
            });
        }
    }

    /// Fields per document.
    pub fn width(&self) -> usize {
        self.columns.len()
    }
}
