//! Field types and the schema (ordered list of named, typed fields) of a store.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// Element type of a 1-D numeric array field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// IEEE-754 binary16 (version 4).
    F16,
    /// bfloat16: the top 16 bits of a binary32 (version 4).
    BF16,
}

impl ElemType {
    pub const ALL: [ElemType; 12] = [
        ElemType::I8,
        ElemType::U8,
        ElemType::I16,
        ElemType::U16,
        ElemType::I32,
        ElemType::U32,
        ElemType::I64,
        ElemType::U64,
        ElemType::F32,
        ElemType::F64,
        ElemType::F16,
        ElemType::BF16,
    ];

    pub fn size(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 => 1,
            ElemType::I16 | ElemType::U16 | ElemType::F16 | ElemType::BF16 => 2,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }

    /// numpy's name for the element type (also the spelling in field type names).
    pub fn name(self) -> &'static str {
        match self {
            ElemType::I8 => "int8",
            ElemType::U8 => "uint8",
            ElemType::I16 => "int16",
            ElemType::U16 => "uint16",
            ElemType::I32 => "int32",
            ElemType::U32 => "uint32",
            ElemType::I64 => "int64",
            ElemType::U64 => "uint64",
            ElemType::F32 => "float32",
            ElemType::F64 => "float64",
            ElemType::F16 => "float16",
            ElemType::BF16 => "bfloat16",
        }
    }
}

/// The most dimensions of a fixed-shape array field.
pub const MAX_DIMS: usize = 8;

/// The shape of a fixed-shape array field: 1 to `MAX_DIMS` dimensions of at least 1, whose
/// elements number at most `u32::MAX` bytes' worth of the largest element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    ndim: u8,
    dims: [u32; MAX_DIMS],
}

impl Shape {
    pub fn new(dims: &[u32]) -> Result<Shape> {
        let elements = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)));
        if dims.is_empty()
            || dims.len() > MAX_DIMS
            || dims.contains(&0)
            || elements.is_none_or(|n| n > u64::from(u32::MAX) / 8)
        {
            return Err(Error::Schema(format!(
                "a fixed shape has 1 to {MAX_DIMS} dimensions of at least 1, and at most \
                 536,870,911 elements; got {dims:?}"
            )));
        }
        let mut shape = Shape {
            ndim: dims.len() as u8,
            dims: [0; MAX_DIMS],
        };
        shape.dims[..dims.len()].copy_from_slice(dims);
        Ok(shape)
    }

    pub fn dims(&self) -> &[u32] {
        &self.dims[..usize::from(self.ndim)]
    }

    /// Elements in an array of this shape.
    pub fn elements(&self) -> usize {
        self.dims().iter().map(|&d| d as usize).product()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims().iter().map(u32::to_string).collect();
        f.write_str(&dims.join(","))
    }
}

/// The type of one field (whether it may be null is the field's `nullable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldType {
    Str,
    Bytes,
    Int64,
    Float64,
    Array(ElemType),
    /// `true` or `false` (version 4).
    Bool,
    /// A list of strings (version 4).
    StrList,
    /// A list of byte strings (version 4).
    BytesList,
    /// A numeric array of a fixed shape, N-D (version 4).
    Tensor(ElemType, Shape),
}

impl FieldType {
    /// One byte on disk (see docs/format.md).
    pub fn code(self) -> u8 {
        match self {
            FieldType::Str => 1,
            FieldType::Bytes => 2,
            FieldType::Int64 => 3,
            FieldType::Float64 => 4,
            FieldType::Bool => 5,
            FieldType::StrList => 6,
            FieldType::BytesList => 7,
            FieldType::Array(elem) => {
                16 + ElemType::ALL.iter().position(|e| *e == elem).unwrap() as u8
            }
            FieldType::Tensor(elem, _) => FieldType::Array(elem).code() | FIXED_SHAPE_BIT,
        }
    }

    pub fn from_code(code: u8) -> Option<FieldType> {
        Some(match code {
            1 => FieldType::Str,
            2 => FieldType::Bytes,
            3 => FieldType::Int64,
            4 => FieldType::Float64,
            5 => FieldType::Bool,
            6 => FieldType::StrList,
            7 => FieldType::BytesList,
            16..=27 => FieldType::Array(ElemType::ALL[usize::from(code - 16)]),
            _ => return None,
        })
    }

    /// The oldest format version whose stores may hold this type: 4 for the types it added.
    pub fn min_version(self) -> u32 {
        match self {
            FieldType::Bool | FieldType::StrList | FieldType::BytesList => 4,
            FieldType::Array(ElemType::F16 | ElemType::BF16) => 4,
            FieldType::Tensor(..) => 4,
            _ => 1,
        }
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldType::Str => f.write_str("str"),
            FieldType::Bytes => f.write_str("bytes"),
            FieldType::Int64 => f.write_str("int64"),
            FieldType::Float64 => f.write_str("float64"),
            FieldType::Bool => f.write_str("bool"),
            FieldType::StrList => f.write_str("list[str]"),
            FieldType::BytesList => f.write_str("list[bytes]"),
            FieldType::Array(elem) => write!(f, "{}[]", elem.name()),
            FieldType::Tensor(elem, shape) => write!(f, "{}[{shape}]", elem.name()),
        }
    }
}

impl FromStr for FieldType {
    type Err = Error;

    /// Parses `str`, `bytes`, `int64` (alias `int`), `float64` (alias `float`), `bool`
    /// (alias `boolean`, Arrow's), `list[str]` and `list[bytes]` (aliases `list<string>` and
    /// `list<binary>`, Arrow's), and `<elem>[]`. A `?` after a type makes a field nullable:
    /// that is the field's (`Field::parse`), not the type's.
    fn from_str(s: &str) -> Result<Self> {
        let ty = match s {
            "str" => FieldType::Str,
            "bytes" => FieldType::Bytes,
            "int64" | "int" => FieldType::Int64,
            "float64" | "float" => FieldType::Float64,
            "bool" | "boolean" => FieldType::Bool,
            "list[str]" | "list<string>" => FieldType::StrList,
            "list[bytes]" | "list<binary>" => FieldType::BytesList,
            _ => {
                // `<elem>[]`, or `<elem>[d1,d2,...]` for a fixed shape
                let parts = s.strip_suffix(']').and_then(|s| s.split_once('['));
                let elem = parts
                    .and_then(|(name, _)| ElemType::ALL.into_iter().find(|e| e.name() == name));
                let dims = parts.map(|(_, dims)| {
                    dims.split(',')
                        .map(|d| d.trim().parse::<u32>().ok())
                        .collect::<Option<Vec<u32>>>()
                });
                match (elem, parts, dims) {
                    (Some(elem), Some((_, "")), _) => FieldType::Array(elem),
                    (Some(elem), _, Some(Some(dims))) => {
                        FieldType::Tensor(elem, Shape::new(&dims)?)
                    }
                    _ => {
                        return Err(Error::Schema(format!(
                            "unknown field type {s:?}; expected one of str, bytes, int64, float64, \
                             bool, list[str], list[bytes] or an array type such as int32[], \
                             uint16[], float16[], bfloat16[], float32[], float64[], or of a fixed \
                             shape: float32[2,3] (a trailing ? makes a field nullable: str?)"
                        )))
                    }
                }
            }
        };
        Ok(ty)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: FieldType,
    /// Whether a document may hold no value (`None`) for the field (version 4).
    pub nullable: bool,
}

/// On disk, bit 7 of a field's type code says it is nullable (docs/format.md §4.1).
pub const NULLABLE_BIT: u8 = 0x80;
/// Bit 6 of an array type code: a fixed shape, whose dimensions follow the field's name.
pub const FIXED_SHAPE_BIT: u8 = 0x40;

impl Field {
    /// A field that every document has a value for.
    pub fn new(name: impl Into<String>, ty: FieldType) -> Field {
        Field {
            name: name.into(),
            ty,
            nullable: false,
        }
    }

    /// A field of the type named `type_name`: a type name (`FieldType::from_str`), nullable
    /// when it ends with `?` (`str?`, `float32[]?`).
    pub fn parse(name: impl Into<String>, type_name: &str) -> Result<Field> {
        let (base, nullable) = match type_name.strip_suffix('?') {
            Some(base) => (base, true),
            None => (type_name, false),
        };
        Ok(Field {
            name: name.into(),
            ty: base.parse()?,
            nullable,
        })
    }

    /// The field's type as `Field::parse` reads it: the type's name, `?` when nullable.
    pub fn type_name(&self) -> String {
        if self.nullable {
            format!("{}?", self.ty)
        } else {
            self.ty.to_string()
        }
    }

    /// The oldest format version whose stores may hold this field.
    pub fn min_version(&self) -> u32 {
        if self.nullable {
            4
        } else {
            self.ty.min_version()
        }
    }
}

/// Ordered fields of every document in a store.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Schema {
    pub fields: Vec<Field>,
}

/// The most fields a schema may have. Documents are namedtuples of their fields, and a corpus
/// stores a handful (text, title, url, token ids ...); a thousand is already a table, not a
/// document. The bound keeps `open()` constant time: its cost grows with the fields (making the
/// `Doc` class takes ~10 us a field), which a crafted file could otherwise push to 65535.
pub const MAX_FIELDS: usize = 1024;
/// The longest field name, in bytes (the format's `u16` length could say more).
pub const MAX_NAME_LEN: usize = 255;
/// The longest schema section: `MAX_FIELDS` fields with names of `MAX_NAME_LEN` bytes and
/// shapes of `MAX_DIMS` dimensions.
pub const MAX_SCHEMA_BYTES: usize = 2 + MAX_FIELDS * (3 + MAX_NAME_LEN + 1 + 4 * MAX_DIMS);

const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Names a document can't use as a field because `Doc` already has them.
const RESERVED: [&str; 1] = ["doc_id"];

impl Schema {
    pub fn new(fields: Vec<Field>) -> Result<Schema> {
        if fields.len() > MAX_FIELDS {
            return Err(Error::Schema(format!(
                "too many fields: {} (a store has at most {MAX_FIELDS})",
                fields.len()
            )));
        }
        let mut seen = std::collections::HashSet::with_capacity(fields.len());
        for field in &fields {
            let name = &field.name;
            // Field names become attributes of Python namedtuples: ASCII identifiers, not
            // keywords, not starting with '_' (namedtuple's own namespace).
            let identifier = name.len() <= MAX_NAME_LEN
                && name.starts_with(|c: char| c.is_ascii_alphabetic())
                && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
            if !identifier || PYTHON_KEYWORDS.contains(&name.as_str()) {
                return Err(Error::Schema(format!(
                    "field name {name:?} must be an ASCII identifier of at most {MAX_NAME_LEN} \
                     characters, starting with a letter, and not a Python keyword"
                )));
            }
            if RESERVED.contains(&name.as_str()) {
                return Err(Error::Schema(format!(
                    "field name {name:?} is reserved for the document key"
                )));
            }
            if !seen.insert(name.as_str()) {
                return Err(Error::Schema(format!("field {name:?} is given twice")));
            }
        }
        Ok(Schema { fields })
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The oldest format version whose stores may hold this schema: 4 when a field is
    /// nullable or of a type version 4 added, else 1.
    pub fn min_version(&self) -> u32 {
        self.fields
            .iter()
            .map(Field::min_version)
            .max()
            .unwrap_or(1)
    }

    /// `u16 count`, then per field `u8 type code (bit 7: nullable), u16 name length, name
    /// (UTF-8)`; little endian.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.fields.len() as u16).to_le_bytes());
        for field in &self.fields {
            let nullable = if field.nullable { NULLABLE_BIT } else { 0 };
            out.push(field.ty.code() | nullable);
            out.extend_from_slice(&(field.name.len() as u16).to_le_bytes());
            out.extend_from_slice(field.name.as_bytes());
            if let FieldType::Tensor(_, shape) = field.ty {
                out.push(shape.ndim);
                for dim in shape.dims() {
                    out.extend_from_slice(&dim.to_le_bytes());
                }
            }
        }
    }

    pub fn decode(buf: &[u8]) -> Result<Schema> {
        let mut pos = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let bytes = buf
                .get(pos..pos + n)
                .ok_or_else(|| Error::corrupt("truncated schema"))?;
            pos += n;
            Ok(bytes)
        };
        let count = u16::from_le_bytes(take(2)?.try_into().unwrap());
        if usize::from(count) > MAX_FIELDS {
            return Err(Error::corrupt(format!(
                "bad schema: {count} fields, more than the {MAX_FIELDS} a store may have"
            )));
        }
        let mut fields = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let code = take(1)?[0];
            let fixed = code & FIXED_SHAPE_BIT != 0;
            let ty = FieldType::from_code(code & !(NULLABLE_BIT | FIXED_SHAPE_BIT))
                .filter(|ty| !fixed || matches!(ty, FieldType::Array(_)))
                .ok_or_else(|| Error::corrupt(format!("unknown field type code {code}")))?;
            let nullable = code & NULLABLE_BIT != 0;
            let len = u16::from_le_bytes(take(2)?.try_into().unwrap());
            if usize::from(len) > MAX_NAME_LEN {
                return Err(Error::corrupt(format!(
                    "bad schema: a field name of {len} bytes, longer than {MAX_NAME_LEN}"
                )));
            }
            let name = std::str::from_utf8(take(usize::from(len))?)
                .map_err(|_| Error::corrupt("field name is not UTF-8"))?;
            let ty = match ty {
                FieldType::Array(elem) if fixed => {
                    let ndim = take(1)?[0];
                    let dims = (0..ndim)
                        .map(|_| Ok(u32::from_le_bytes(take(4)?.try_into().unwrap())))
                        .collect::<Result<Vec<u32>>>()?;
                    let shape = Shape::new(&dims)
                        .map_err(|e| Error::corrupt(format!("bad schema: field {name:?}: {e}")))?;
                    FieldType::Tensor(elem, shape)
                }
                ty => ty,
            };
            fields.push(Field {
                name: name.to_owned(),
                ty,
                nullable,
            });
        }
        if pos != buf.len() {
            return Err(Error::corrupt("trailing bytes after schema"));
        }
        Schema::new(fields).map_err(|e| Error::corrupt(format!("bad schema: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_of_too_many_elements_are_refused_however_large() {
        assert!(Shape::new(&[536_870_911]).is_ok());
        assert!(Shape::new(&[536_870_912]).is_err());
        // 2^61 elements: their bytes (x 8) wrap to 0 in 64 bits (a mutated store found this).
        assert!(Shape::new(&[1 << 31, 1 << 30]).is_err());
        assert!(Shape::new(&[u32::MAX; MAX_DIMS]).is_err());
    }

    #[test]
    fn type_names_round_trip() {
        let mut names = vec![
            "str",
            "bytes",
            "int64",
            "float64",
            "bool",
            "list[str]",
            "list[bytes]",
        ];
        let arrays: Vec<String> = ElemType::ALL
            .iter()
            .map(|e| format!("{}[]", e.name()))
            .collect();
        names.extend(arrays.iter().map(String::as_str));
        for name in names {
            let ty: FieldType = name.parse().unwrap();
            assert_eq!(ty.to_string(), name);
            assert_eq!(FieldType::from_code(ty.code()), Some(ty));
        }
        assert!("float16".parse::<FieldType>().is_err());
        for (alias, name) in [
            ("boolean", "bool"),
            ("list<string>", "list[str]"),
            ("list<binary>", "list[bytes]"),
        ] {
            assert_eq!(alias.parse::<FieldType>().unwrap().to_string(), name);
        }
        assert!("int32[][]".parse::<FieldType>().is_err());
    }

    #[test]
    fn schema_round_trips_and_validates() {
        let schema = Schema::new(vec![
            Field::new("text", FieldType::Str),
            Field::new("tokens", FieldType::Array(ElemType::U16)),
        ])
        .unwrap();
        let mut buf = Vec::new();
        schema.encode(&mut buf);
        assert_eq!(Schema::decode(&buf).unwrap(), schema);
        assert!(Schema::decode(&buf[..buf.len() - 1]).is_err());
        let dup = vec![
            Field::new("a", FieldType::Str),
            Field::new("a", FieldType::Str),
        ];
        assert!(Schema::new(dup).is_err());
        assert!(Schema::new(vec![Field::new("doc_id", FieldType::Str)]).is_err());
        assert!(Schema::new(vec![Field::new("a b", FieldType::Str)]).is_err());
    }

    #[test]
    fn nullable_fields_set_bit_7_of_their_type_code() {
        let schema = Schema::new(vec![
            Field::parse("title", "str?").unwrap(),
            Field::parse("flag", "bool").unwrap(),
        ])
        .unwrap();
        assert!(schema.fields[0].nullable && !schema.fields[1].nullable);
        assert_eq!(schema.fields[0].type_name(), "str?");
        let mut buf = Vec::new();
        schema.encode(&mut buf);
        assert_eq!(buf, b"\x02\x00\x81\x05\x00title\x05\x04\x00flag");
        assert_eq!(Schema::decode(&buf).unwrap(), schema);
        assert_eq!(schema.min_version(), 4);
        assert_eq!(
            Schema::new(vec![Field::new("a", FieldType::Str)])
                .unwrap()
                .min_version(),
            1
        );
        assert!(Field::parse("a", "str??").is_err());
    }

    fn fields(count: usize, name_len: usize) -> Vec<Field> {
        (0..count)
            .map(|i| {
                let name = format!("f{i}_");
                Field::new(
                    format!("{name}{}", "x".repeat(name_len - name.len())),
                    FieldType::Str,
                )
            })
            .collect()
    }

    #[test]
    fn schemas_are_bounded_in_fields_and_name_lengths() {
        let mut widest = Schema::new(fields(MAX_FIELDS, MAX_NAME_LEN)).unwrap();
        let mut buf = Vec::new();
        widest.encode(&mut buf);
        assert_eq!(buf.len(), 2 + MAX_FIELDS * (3 + MAX_NAME_LEN));
        assert_eq!(Schema::decode(&buf).unwrap(), widest);
        let shape = Shape::new(&[1; MAX_DIMS]).unwrap();
        for field in &mut widest.fields {
            field.ty = FieldType::Tensor(ElemType::U8, shape);
        }
        buf.clear();
        widest.encode(&mut buf);
        assert_eq!(buf.len(), MAX_SCHEMA_BYTES);
        assert_eq!(Schema::decode(&buf).unwrap(), widest);
        let err = Schema::new(fields(MAX_FIELDS + 1, 8)).unwrap_err();
        assert!(err.to_string().contains("at most 1024"), "{err}");
        assert!(Schema::new(fields(1, MAX_NAME_LEN + 1)).is_err());
        // Read from a file: the count and each name length are refused before anything is read.
        let mut crafted = Vec::new();
        Schema {
            fields: fields(MAX_FIELDS + 1, 8),
        }
        .encode(&mut crafted);
        let err = Schema::decode(&crafted).unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)) && err.to_string().contains("1025 fields"));
        let mut long_name = Vec::new();
        Schema {
            fields: fields(1, MAX_NAME_LEN + 1),
        }
        .encode(&mut long_name);
        let err = Schema::decode(&long_name).unwrap_err();
        assert!(err.to_string().contains("256 bytes"), "{err}");
    }
}
