//! Encoding of one document's fields into the raw (uncompressed) record bytes, and back.
//!
//! Fields are stored in schema order: `str`/`bytes` as varint length + bytes, `int64` as a
//! zig-zag varint, `float64` as 8 bytes, arrays as varint element count + the elements' byte
//! planes (see `planes`). Version 4 adds `bool` (one byte), lists of `str` or `bytes` (varint
//! count, then each item as a `bytes` value) and nullable fields (a presence byte, then the
//! value when it is 1); see docs/format.md §5.

use crate::error::{Error, Result};
use crate::format::planes;
use crate::format::schema::{ElemType, Field, FieldType, Schema, Shape};
use crate::format::varint;

#[cfg(target_endian = "big")]
compile_error!("docstore stores arrays little-endian and supports little-endian hosts only");

/// One field value, borrowed from the caller (writing) or from a decoded record (reading).
/// Values are equal when they hold the same data: an `Array` equals the `Planes` of its
/// elements.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    Str(&'a str),
    Bytes(&'a [u8]),
    Int64(i64),
    Float64(f64),
    /// Little-endian elements; the length is a multiple of the element size.
    Array(ElemType, &'a [u8]),
    /// An array as a record stores it: its elements' byte planes (what reading gives;
    /// `to_elements` or `planes::join` turn them into elements).
    Planes(ElemType, &'a [u8]),
    /// No value, in a nullable field.
    Null,
    Bool(bool),
    /// A `list[str]` or `list[bytes]` value as a record stores it (what reading gives, and what
    /// `put_list` makes): varint count, then each item as varint length + bytes. `list_items`
    /// reads the items; `utf8` says they are `str`s (checked to be UTF-8 when read).
    List {
        utf8: bool,
        raw: &'a [u8],
    },
    /// A fixed-shape array as a record stores it: its elements' byte planes, and its shape
    /// (what reading a fixed-shape field gives; written from an `Array` of as many elements).
    Tensor(ElemType, Shape, &'a [u8]),
    /// A list value as columns hold it: item `i` is `data[offsets[i]..offsets[i + 1]]`
    /// (`offsets` non-empty, non-decreasing and within `data`).
    Items {
        offsets: &'a [i64],
        data: &'a [u8],
    },
}

impl Value<'_> {
    /// The little-endian elements of an `Array` or `Planes` value.
    pub fn to_elements(&self) -> Option<(ElemType, Vec<u8>)> {
        match *self {
            Value::Array(elem, bytes) => Some((elem, bytes.to_vec())),
            Value::Planes(elem, bytes) | Value::Tensor(elem, _, bytes) => {
                let mut elements = vec![0; bytes.len()];
                planes::join(bytes, elem.size(), &mut elements);
                Some((elem, elements))
            }
            _ => None,
        }
    }
}

impl PartialEq for Value<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            (Value::Int64(a), Value::Int64(b)) => a == b,
            (Value::Float64(a), Value::Float64(b)) => a == b,
            (
                Value::Array(..) | Value::Planes(..) | Value::Tensor(..),
                Value::Array(..) | Value::Planes(..) | Value::Tensor(..),
            ) => self.to_elements() == other.to_elements(),
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (
                Value::List { .. } | Value::Items { .. },
                Value::List { .. } | Value::Items { .. },
            ) => self.to_items() == other.to_items(),
            _ => false,
        }
    }
}

impl Value<'_> {
    pub fn type_name(&self) -> String {
        match self {
            Value::Str(_) => "str".into(),
            Value::Bytes(_) => "bytes".into(),
            Value::Int64(_) => "int64".into(),
            Value::Float64(_) => "float64".into(),
            Value::Array(elem, _) | Value::Planes(elem, _) => format!("{}[]", elem.name()),
            Value::Tensor(elem, shape, _) => format!("{}[{shape}]", elem.name()),
            Value::Null => "None".into(),
            Value::Bool(_) => "bool".into(),
            Value::List { .. } | Value::Items { .. } => "list".into(),
        }
    }

    /// The items of a `List` or `Items` value (None for another value or a malformed list).
    pub fn to_items(&self) -> Option<Vec<&[u8]>> {
        match *self {
            Value::List { raw, .. } => list_items(raw).collect::<Result<_>>().ok(),
            Value::Items { offsets, data } => offsets
                .windows(2)
                .map(|w| {
                    let (start, end) = (usize::try_from(w[0]).ok()?, usize::try_from(w[1]).ok()?);
                    data.get(start..end)
                })
                .collect(),
            _ => None,
        }
    }
}

/// Appends a list of `items` as a record stores it (the bytes of a `Value::List`).
pub fn put_list<'b>(out: &mut Vec<u8>, count: usize, items: impl IntoIterator<Item = &'b [u8]>) {
    varint::put(out, count as u64);
    for item in items {
        put_bytes(out, item);
    }
}

/// The items of a list as a record stores it (`Value::List`), each checked to lie within it.
pub fn list_items(raw: &[u8]) -> ListItems<'_> {
    let mut pos = 0;
    let left = varint::get(raw, &mut pos);
    ListItems { raw, pos, left }
}

pub struct ListItems<'a> {
    raw: &'a [u8],
    pos: usize,
    /// Items not yet read, or why the count could not be read.
    left: Result<u64>,
}

impl<'a> Iterator for ListItems<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.left {
            Ok(0) => None,
            Ok(left) => {
                *left -= 1;
                let item = varint::get(self.raw, &mut self.pos)
                    .and_then(|len| take(self.raw, &mut self.pos, len));
                if item.is_err() {
                    self.left = Ok(0);
                }
                Some(item)
            }
            Err(_) => Some(std::mem::replace(&mut self.left, Ok(0)).map(|_| &[][..])),
        }
    }
}

/// Appends the raw record of `values` (one per schema field, in order) to `out`.
pub fn encode(schema: &Schema, values: &[Value<'_>], out: &mut Vec<u8>) -> Result<()> {
    if values.len() != schema.len() {
        return Err(Error::Schema(format!(
            "expected {} field values, got {}",
            schema.len(),
            values.len()
        )));
    }
    for (field, value) in schema.fields.iter().zip(values) {
        match (field.nullable, value) {
            (true, Value::Null) => {
                out.push(0);
                continue;
            }
            (true, _) => out.push(1),
            (false, Value::Null) => {
                return Err(Error::FieldType(format!(
                    "field {:?} is {}, got None; declare it {}? to store None",
                    field.name, field.ty, field.ty
                )))
            }
            (false, _) => {}
        }
        match (field.ty, value) {
            (FieldType::Str, Value::Str(s)) => put_bytes(out, s.as_bytes()),
            (FieldType::Bytes, Value::Bytes(b)) => put_bytes(out, b),
            (FieldType::Int64, Value::Int64(v)) => varint::put(out, varint::zigzag(*v)),
            (FieldType::Float64, Value::Float64(v)) => out.extend_from_slice(&v.to_le_bytes()),
            (FieldType::Array(want), Value::Array(elem, bytes) | Value::Planes(elem, bytes))
                if want == *elem =>
            {
                if bytes.len() % elem.size() != 0 {
                    return Err(Error::FieldType(format!(
                        "field {:?}: array byte length {} is not a multiple of {}",
                        field.name,
                        bytes.len(),
                        elem.size()
                    )));
                }
                varint::put(out, (bytes.len() / elem.size()) as u64);
                match value {
                    Value::Planes(..) => out.extend_from_slice(bytes),
                    _ => planes::split(bytes, elem.size(), out),
                }
            }
            (
                FieldType::Tensor(want, shape),
                Value::Array(elem, bytes)
                | Value::Planes(elem, bytes)
                | Value::Tensor(elem, _, bytes),
            ) if want == *elem => {
                // No count: the shape says how many elements there are.
                if bytes.len() != shape.elements() * elem.size() {
                    return Err(Error::FieldType(format!(
                        "field {:?} is {}, got {} elements (its shape holds {})",
                        field.name,
                        field.ty,
                        bytes.len() / elem.size(),
                        shape.elements()
                    )));
                }
                match value {
                    Value::Array(..) => planes::split(bytes, elem.size(), out),
                    _ => out.extend_from_slice(bytes),
                }
            }
            (FieldType::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
            (
                FieldType::StrList | FieldType::BytesList,
                Value::List { .. } | Value::Items { .. },
            ) => {
                let items = value.to_items().ok_or_else(|| {
                    Error::FieldType(format!("field {:?}: a malformed list value", field.name))
                })?;
                if field.ty == FieldType::StrList {
                    if let Some(i) = items.iter().position(|s| std::str::from_utf8(s).is_err()) {
                        return Err(Error::FieldType(format!(
                            "field {:?}: item {i} of its list is not valid UTF-8",
                            field.name
                        )));
                    }
                }
                put_list(out, items.len(), items);
            }
            (ty, value) => {
                return Err(Error::FieldType(format!(
                    "field {:?} is {ty}, got a {} value",
                    field.name,
                    value.type_name()
                )))
            }
        }
    }
    Ok(())
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    varint::put(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Decodes every field of a raw record.
pub fn decode<'a>(schema: &Schema, raw: &'a [u8]) -> Result<Vec<Value<'a>>> {
    let mut pos = 0;
    let values = schema
        .fields
        .iter()
        .map(|field| read_value(field, raw, &mut pos))
        .collect::<Result<Vec<_>>>()?;
    if pos != raw.len() {
        return Err(Error::corrupt(
            "trailing bytes after the last field of a record",
        ));
    }
    Ok(values)
}

/// A field of a raw record as stored: like `Value`, but `str` fields come as their bytes, not
/// yet checked to be UTF-8, for callers that check while converting (the Python bindings hand
/// them to CPython's decoder, which validates anyway).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RawValue<'a> {
    Utf8(&'a [u8]),
    Other(Value<'a>),
}

/// The fields of a raw record in schema order, as `RawValue`s (use `raw_field` for just one).
pub fn raw_fields<'a>(schema: &'a Schema, raw: &'a [u8]) -> RawFields<'a> {
    RawFields {
        fields: schema.fields.iter(),
        raw,
        pos: 0,
        failed: false,
    }
}

/// Field `index` of a raw record, skipping the ones before it.
pub fn raw_field<'a>(schema: &Schema, raw: &'a [u8], index: usize) -> Result<RawValue<'a>> {
    let mut pos = 0;
    for field in &schema.fields[..index] {
        skip_value(field, raw, &mut pos)?;
    }
    read_raw(&schema.fields[index], raw, &mut pos)
}

pub struct RawFields<'a> {
    fields: std::slice::Iter<'a, crate::format::schema::Field>,
    raw: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for RawFields<'a> {
    type Item = Result<RawValue<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let result = match self.fields.next() {
            Some(field) => read_raw(field, self.raw, &mut self.pos),
            None if self.pos != self.raw.len() => Err(Error::corrupt(
                "trailing bytes after the last field of a record",
            )),
            None => return None,
        };
        self.failed = result.is_err();
        Some(result)
    }
}

fn read_raw<'a>(field: &Field, raw: &'a [u8], pos: &mut usize) -> Result<RawValue<'a>> {
    if field.ty == FieldType::Str && !field.nullable {
        let len = varint::get(raw, pos)?;
        return take(raw, pos, len).map(RawValue::Utf8);
    }
    read_value(field, raw, pos).map(RawValue::Other)
}

/// Decodes the field at `index`, skipping the ones before it.
pub fn decode_field<'a>(schema: &Schema, raw: &'a [u8], index: usize) -> Result<Value<'a>> {
    let mut pos = 0;
    for field in &schema.fields[..index] {
        skip_value(field, raw, &mut pos)?;
    }
    read_value(&schema.fields[index], raw, &mut pos)
}

fn take<'a>(raw: &'a [u8], pos: &mut usize, len: u64) -> Result<&'a [u8]> {
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| pos.checked_add(len))
        .filter(|end| *end <= raw.len())
        .ok_or_else(|| Error::corrupt("field runs past the end of its record"))?;
    let bytes = &raw[*pos..end];
    *pos = end;
    Ok(bytes)
}

fn array_len(elem: ElemType, raw: &[u8], pos: &mut usize) -> Result<u64> {
    let count = varint::get(raw, pos)?;
    count
        .checked_mul(elem.size() as u64)
        .ok_or_else(|| Error::corrupt("array length overflows"))
}

/// Whether a nullable field's value is present: its presence byte, `0` (null) or `1`.
fn present(field: &Field, raw: &[u8], pos: &mut usize) -> Result<bool> {
    match take(raw, pos, 1)?[0] {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::corrupt(format!(
            "the presence byte of nullable field {:?} is neither 0 nor 1",
            field.name
        ))),
    }
}

fn read_value<'a>(field: &Field, raw: &'a [u8], pos: &mut usize) -> Result<Value<'a>> {
    if field.nullable && !present(field, raw, pos)? {
        return Ok(Value::Null);
    }
    Ok(match field.ty {
        FieldType::Str => {
            let len = varint::get(raw, pos)?;
            let bytes = take(raw, pos, len)?;
            Value::Str(
                std::str::from_utf8(bytes).map_err(|_| Error::corrupt("str field is not UTF-8"))?,
            )
        }
        FieldType::Bytes => {
            let len = varint::get(raw, pos)?;
            Value::Bytes(take(raw, pos, len)?)
        }
        FieldType::Int64 => Value::Int64(varint::unzigzag(varint::get(raw, pos)?)),
        FieldType::Float64 => {
            Value::Float64(f64::from_le_bytes(take(raw, pos, 8)?.try_into().unwrap()))
        }
        FieldType::Array(elem) => {
            let len = array_len(elem, raw, pos)?;
            Value::Planes(elem, take(raw, pos, len)?)
        }
        FieldType::Tensor(elem, shape) => Value::Tensor(
            elem,
            shape,
            take(raw, pos, (shape.elements() * elem.size()) as u64)?,
        ),
        FieldType::Bool => match take(raw, pos, 1)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            _ => return Err(Error::corrupt("bool field is neither 0 nor 1")),
        },
        FieldType::StrList | FieldType::BytesList => {
            let start = *pos;
            let count = varint::get(raw, pos)?;
            // Each item takes a byte at least: a count beyond the record fails at its end.
            for _ in 0..count {
                let len = varint::get(raw, pos)?;
                let item = take(raw, pos, len)?;
                if field.ty == FieldType::StrList && std::str::from_utf8(item).is_err() {
                    return Err(Error::corrupt("list[str] item is not UTF-8"));
                }
            }
            Value::List {
                utf8: field.ty == FieldType::StrList,
                raw: &raw[start..*pos],
            }
        }
    })
}

fn skip_value(field: &Field, raw: &[u8], pos: &mut usize) -> Result<()> {
    if field.nullable {
        return read_value(field, raw, pos).map(drop);
    }
    let len = match field.ty {
        FieldType::Str | FieldType::Bytes => varint::get(raw, pos)?,
        FieldType::Int64 => {
            varint::get(raw, pos)?;
            0
        }
        FieldType::Float64 => 8,
        FieldType::Array(elem) => array_len(elem, raw, pos)?,
        FieldType::Tensor(elem, shape) => (shape.elements() * elem.size()) as u64,
        FieldType::Bool | FieldType::StrList | FieldType::BytesList => {
            return read_value(field, raw, pos).map(drop)
        }
    };
    take(raw, pos, len).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::schema::Field;

    fn schema() -> Schema {
        let fields = [
            ("text", FieldType::Str),
            ("blob", FieldType::Bytes),
            ("n", FieldType::Int64),
            ("x", FieldType::Float64),
            ("tok", FieldType::Array(ElemType::U16)),
        ];
        Schema::new(
            fields
                .iter()
                .map(|(n, t)| Field::new(n.to_string(), *t))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn round_trips_every_type() {
        let schema = schema();
        let tok: Vec<u8> = [1u16, 2, 65535]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let values = vec![
            Value::Str("héllo"),
            Value::Bytes(b"\x00\xff"),
            Value::Int64(i64::MIN),
            Value::Float64(-0.5),
            Value::Array(ElemType::U16, &tok),
        ];
        let mut raw = Vec::new();
        encode(&schema, &values, &mut raw).unwrap();
        assert_eq!(decode(&schema, &raw).unwrap(), values);
        for (i, v) in values.iter().enumerate() {
            assert_eq!(decode_field(&schema, &raw, i).unwrap(), *v);
        }
        for cut in 0..raw.len() {
            assert!(decode(&schema, &raw[..cut]).is_err());
        }
    }

    #[test]
    fn raw_fields_match_decoded_fields() {
        let schema = schema();
        let values = [
            Value::Str("héllo"),
            Value::Bytes(b"x"),
            Value::Int64(-5),
            Value::Float64(2.5),
            Value::Array(ElemType::U16, &[1, 0]),
        ];
        let mut raw = Vec::new();
        encode(&schema, &values, &mut raw).unwrap();
        fn as_value(v: RawValue<'_>) -> Value<'_> {
            match v {
                RawValue::Utf8(b) => Value::Str(std::str::from_utf8(b).unwrap()),
                RawValue::Other(v) => v,
            }
        }
        let all: Vec<Value> = raw_fields(&schema, &raw)
            .map(|v| as_value(v.unwrap()))
            .collect();
        assert_eq!(all, values);
        assert_eq!(as_value(raw_field(&schema, &raw, 3).unwrap()), values[3]);
        raw.push(0);
        assert!(raw_fields(&schema, &raw).last().unwrap().is_err());
    }

    /// Crafted version 4 records (a file made to pass its checksums): every decoder refuses
    /// them as corrupt, none panics or reads past the record.
    #[test]
    fn crafted_version_4_records_are_corrupt() {
        let field = |name: &str, ty: &str| Field::parse(name, ty).unwrap();
        let cases: &[(&str, &[u8])] = &[
            ("str?", &[2]),  // presence byte 2
            ("str?", &[1]),  // present, no value
            ("bool", &[2]),  // neither 0 nor 1
            ("bool?", &[1]), // present, no byte
            (
                "list[str]",
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            ), // count 2^63-1
            ("list[str]", &[2, 1, b'a']), // 2 items, 1 there
            ("list[str]", &[1, 0xff, 0xff, 0xff, 0xff, 0x0f, b'a']), // item beyond record
            ("list[str]", &[1, 1, 0xff]), // item not UTF-8
            ("list[bytes]?", &[1, 3, 0]), // 3 items, none there
            ("float16[]", &[3, 0, 0]), // 3 elements, 1 there
            ("float32[2,3]?", &[1, 0, 0, 0, 0]), // 24 bytes, 4 there
            ("float32[2,3]", &[]),
        ];
        for &(ty, raw) in cases {
            let schema = Schema::new(vec![field("f", ty), field("g", "int64")]).unwrap();
            let check = |what: &str, result: Result<()>| {
                assert!(
                    matches!(result, Err(Error::Corrupt(_))),
                    "{ty} {raw:?} {what}: {result:?}"
                );
            };
            check("decode", decode(&schema, raw).map(drop));
            check("decode_field", decode_field(&schema, raw, 0).map(drop));
            check("raw_field", raw_field(&schema, raw, 1).map(drop));
            let all: Result<Vec<_>> = raw_fields(&schema, raw).collect();
            check("raw_fields", all.map(drop));
        }
    }

    #[test]
    fn rejects_wrong_types_and_counts() {
        let schema = schema();
        let mut raw = Vec::new();
        let err = encode(&schema, &[Value::Int64(1)], &mut raw).unwrap_err();
        assert!(err.to_string().contains("expected 5"));
        let values = [
            Value::Int64(1),
            Value::Bytes(b""),
            Value::Int64(1),
            Value::Float64(1.0),
            Value::Array(ElemType::U16, &[]),
        ];
        let err = encode(&schema, &values, &mut raw).unwrap_err();
        assert!(err.to_string().contains("\"text\" is str"), "{err}");
    }
}
