//! A contract's ABI file, as the CLI reads it: what `tally push` and `tally query` encode
//! arguments with, what they decode return data and events with, and what `tally abigen`
//! generates code from.
//!
//! ```json
//! {
//!   "structs": { "Reserves": [{ "name": "a", "type": "u64" }, { "name": "b", "type": "u64" }] },
//!   "actions": {
//!     "swap": { "args": [{ "name": "user", "type": "name" }], "returns": "u64" },
//!     "init": [{ "name": "token_a", "type": "name" }]
//!   },
//!   "queries": { "reserves": { "args": [], "returns": "Reserves" } },
//!   "events": { "swapped": [{ "name": "user", "type": "name" }, { "name": "out", "type": "u64" }] },
//!   "tables": {
//!     "shares": { "key": "name", "value": "u64" },
//!     "pool": { "key": { "prefix": "pool" }, "value": "Reserves" },
//!     "orders": { "key": { "prefix": "o", "parts": ["name", "u64"] }, "value": [{ "name": "amount", "type": "u64" }] }
//!   }
//! }
//! ```
//!
//! An action or a query is either its argument list (no return data) or `{"args", "returns"}`
//! (Antelope's ABI keeps action results in a list of their own; one entry per action reads
//! better and cannot drift from the action). Every value is borsh: integers little-endian,
//! `name` 8 bytes, `string`/`bytes` and lists `T[]` after a u32 count, options `T?` after a
//! 0/1 byte, a struct its fields in order.
//!
//! A table says how the contract lays out some of its storage, for readers (`tally get`,
//! `tally keys`), as Antelope's ABI `tables` do for `cleos get table`: a key is a constant
//! prefix (UTF-8) then typed parts, each written as the SDKs' `Key` writes it (an integer or a
//! name little-endian, a `string` or `bytes` as its raw bytes with no count, so only as the
//! last part); `"key": "name"` is short for `{"prefix": "", "parts": ["name"]}`. The value is
//! a type, or a field list as an event's (a struct nothing else names). A stored key belongs
//! to the first table, longest prefix first, whose layout it fits exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use super::local::parse_name;

/// The types an ABI may use, for the messages of `--help` and errors.
pub const TYPES: &str = "bool, u8, u16, u32, u64, u128, i32, i64, name, string, bytes (hex), \
                         T[] (a list), T? (an option), or a struct of \"structs\"";

/// The deepest a type may nest (`u64[][]?` is 3): generated code and the JSON decoder recurse
/// once per level, and no real contract needs more.
const MAX_TYPE_DEPTH: usize = 8;

/// A field's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Bool,
    U8,
    U16,
    U32,
    U64,
    U128,
    I32,
    I64,
    Name,
    String,
    Bytes,
    /// `T[]`: a u32 count, then the items.
    List(Box<Type>),
    /// `T?`: 0, or 1 then the value.
    Option(Box<Type>),
    /// A struct declared under "structs".
    Struct(String),
}

impl Type {
    /// Its spelling in an ABI file.
    pub fn spelling(&self) -> String {
        match self {
            Type::Bool => "bool".into(),
            Type::U8 => "u8".into(),
            Type::U16 => "u16".into(),
            Type::U32 => "u32".into(),
            Type::U64 => "u64".into(),
            Type::U128 => "u128".into(),
            Type::I32 => "i32".into(),
            Type::I64 => "i64".into(),
            Type::Name => "name".into(),
            Type::String => "string".into(),
            Type::Bytes => "bytes".into(),
            Type::List(t) => format!("{}[]", t.spelling()),
            Type::Option(t) => format!("{}?", t.spelling()),
            Type::Struct(s) => s.clone(),
        }
    }

    /// Whether a value is one JSON scalar a command line argument spells plainly (`alice`,
    /// `100`), rather than JSON text (`[1,2]`, `{"a":1}`).
    pub fn is_scalar(&self) -> bool {
        !matches!(self, Type::List(_) | Type::Option(_) | Type::Struct(_))
    }

    /// The size of every value of this type, if they all have one.
    pub fn fixed_size(&self, abi: &Abi) -> Option<u32> {
        match self {
            Type::Bool | Type::U8 => Some(1),
            Type::U16 => Some(2),
            Type::U32 | Type::I32 => Some(4),
            Type::U64 | Type::I64 | Type::Name => Some(8),
            Type::U128 => Some(16),
            Type::String | Type::Bytes | Type::List(_) | Type::Option(_) => None,
            Type::Struct(s) => abi.structs[s].iter().map(|f| f.ty.fixed_size(abi)).sum(),
        }
    }

    fn parse(text: &str, structs: &BTreeSet<&str>) -> anyhow::Result<Type> {
        Self::parse_at(text.trim(), structs, 0)
    }

    fn parse_at(text: &str, structs: &BTreeSet<&str>, depth: usize) -> anyhow::Result<Type> {
        if depth > MAX_TYPE_DEPTH {
            bail!("type nests more than {MAX_TYPE_DEPTH} deep");
        }
        if let Some(inner) = text.strip_suffix("[]") {
            return Ok(Type::List(Box::new(Self::parse_at(
                inner,
                structs,
                depth + 1,
            )?)));
        }
        if let Some(inner) = text.strip_suffix('?') {
            return Ok(Type::Option(Box::new(Self::parse_at(
                inner,
                structs,
                depth + 1,
            )?)));
        }
        Ok(match text {
            "bool" => Type::Bool,
            "u8" => Type::U8,
            "u16" => Type::U16,
            "u32" => Type::U32,
            "u64" => Type::U64,
            "u128" => Type::U128,
            "i32" => Type::I32,
            "i64" => Type::I64,
            "name" => Type::Name,
            "string" => Type::String,
            "bytes" => Type::Bytes,
            s if structs.contains(s) => Type::Struct(s.to_string()),
            other => bail!("unknown type {other:?} (known: {TYPES})"),
        })
    }

    /// This type with every struct name prefixed by `prefix`.
    fn prefixed(&self, prefix: &str) -> Type {
        match self {
            Type::List(t) => Type::List(Box::new(t.prefixed(prefix))),
            Type::Option(t) => Type::Option(Box::new(t.prefixed(prefix))),
            Type::Struct(s) => Type::Struct(format!("{prefix}{s}")),
            other => other.clone(),
        }
    }

    /// Every struct this type names, directly or inside lists and options.
    fn structs<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Type::List(t) | Type::Option(t) => t.structs(out),
            Type::Struct(s) => out.push(s),
            _ => {}
        }
    }
}

/// One field: of an action's or query's arguments, an event, or a struct.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub ty: Type,
}

/// An action or a query: its arguments and what it returns.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    pub args: Vec<Field>,
    pub returns: Option<Type>,
}

/// A contract's ABI file, checked: every name valid, every type known, no struct containing
/// itself.
#[derive(Debug, Default, Clone)]
pub struct Abi {
    pub actions: BTreeMap<String, Entry>,
    pub queries: BTreeMap<String, Entry>,
    pub events: BTreeMap<String, Vec<Field>>,
    pub structs: BTreeMap<String, Vec<Field>>,
    pub tables: BTreeMap<String, Table>,
}

/// The keys an ABI file may have at its top.
const SECTIONS: [&str; 5] = ["structs", "actions", "queries", "events", "tables"];

/// How a table's stored keys are laid out: `prefix`, then one value of each part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyShape {
    /// The bytes every key of the table starts with.
    pub prefix: Vec<u8>,
    /// The typed parts after it, each a fixed-size built-in type but the last, which may
    /// also be `string` or `bytes` (its raw bytes, to the end of the key).
    pub parts: Vec<Type>,
}

/// What a table stores under each key.
#[derive(Debug, Clone)]
pub enum TableValue {
    /// A value of one type.
    Type(Type),
    /// A record of fields, as an event's.
    Fields(Vec<Field>),
}

/// A table: a family of stored keys and the type of their values.
#[derive(Debug, Clone)]
pub struct Table {
    /// Its keys' layout.
    pub key: KeyShape,
    /// Its values' type.
    pub value: TableValue,
}

impl Abi {
    /// Reads and checks the ABI file at `path`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read ABI {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{} is not a valid ABI file", path.display()))
    }

    /// Parses and checks an ABI file's text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let value: Value = serde_json::from_str(text)?;
        let Value::Object(top) = value else {
            bail!("an ABI file is a JSON object with {}", SECTIONS.join(", "));
        };
        for key in top.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                bail!(
                    "unknown section {key:?} (an ABI file has {})",
                    SECTIONS.join(", ")
                );
            }
        }
        let section = |key: &str| -> anyhow::Result<Map<String, Value>> {
            match top.get(key) {
                None => Ok(Map::new()),
                Some(Value::Object(m)) => Ok(m.clone()),
                Some(_) => bail!("\"{key}\" must be an object of NAME: ..."),
            }
        };
        let raw_structs = section("structs")?;
        for name in raw_structs.keys() {
            let ok = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_alphanumeric());
            if !ok {
                bail!(
                    "struct {name:?}: a struct's name is CamelCase (a capital letter, then letters \
                     and digits), so it can never be taken for a built-in type"
                );
            }
        }
        let struct_names: BTreeSet<&str> = raw_structs.keys().map(String::as_str).collect();
        let mut abi = Abi::default();
        for (name, v) in &raw_structs {
            let fields = fields(v, &struct_names).with_context(|| format!("struct {name}"))?;
            if fields.is_empty() {
                // A list of empty structs would be a count with no bytes behind it: a decoder
                // could be made to loop 2^32 times over 4 bytes.
                bail!("struct {name} has no fields; give it at least one");
            }
            abi.structs.insert(name.clone(), fields);
        }
        abi.check_no_cycles()?;
        for (name, v) in section("actions")? {
            parse_name(&name).context("action names")?;
            let entry = entry(v, &struct_names).with_context(|| format!("action {name}"))?;
            abi.actions.insert(name, entry);
        }
        for (name, v) in section("queries")? {
            parse_name(&name).context("query names")?;
            let entry = entry(v, &struct_names).with_context(|| format!("query {name}"))?;
            abi.queries.insert(name, entry);
        }
        for (name, v) in section("events")? {
            parse_name(&name).context("event names")?;
            let fields = fields(&v, &struct_names).with_context(|| format!("event {name}"))?;
            abi.events.insert(name, fields);
        }
        for (name, v) in section("tables")? {
            if !is_identifier(&name) {
                bail!("table {name:?}: a table's name is an identifier (letters, digits and _)");
            }
            let table = table(&v, &struct_names).with_context(|| format!("table {name}"))?;
            abi.tables.insert(name, table);
        }
        Ok(abi)
    }

    /// Fails if a struct contains itself, through any path: its values would have no end.
    fn check_no_cycles(&self) -> anyhow::Result<()> {
        fn visit<'a>(
            abi: &'a Abi,
            name: &'a str,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) -> anyhow::Result<()> {
            if done.contains(name) {
                return Ok(());
            }
            if let Some(i) = path.iter().position(|p| *p == name) {
                let mut cycle = path[i..].to_vec();
                cycle.push(name);
                bail!(
                    "structs contain themselves: {} (a value would have no end)",
                    cycle.join(" → ")
                );
            }
            path.push(name);
            for f in &abi.structs[name] {
                let mut inner = Vec::new();
                f.ty.structs(&mut inner);
                for s in inner {
                    visit(abi, s, path, done)?;
                }
            }
            path.pop();
            done.insert(name);
            Ok(())
        }
        let mut done = BTreeSet::new();
        for name in self.structs.keys() {
            visit(self, name, &mut Vec::new(), &mut done)?;
        }
        Ok(())
    }

    /// The same ABI with every struct renamed `prefix` + name (what `tally abigen --prefix`
    /// generates C from, so two contracts' headers can be included side by side).
    pub fn with_struct_prefix(&self, prefix: &str) -> Abi {
        let fields = |fs: &[Field]| -> Vec<Field> {
            fs.iter()
                .map(|f| Field {
                    name: f.name.clone(),
                    ty: f.ty.prefixed(prefix),
                })
                .collect()
        };
        let entry = |e: &Entry| Entry {
            args: fields(&e.args),
            returns: e.returns.as_ref().map(|t| t.prefixed(prefix)),
        };
        Abi {
            actions: self
                .actions
                .iter()
                .map(|(k, e)| (k.clone(), entry(e)))
                .collect(),
            queries: self
                .queries
                .iter()
                .map(|(k, e)| (k.clone(), entry(e)))
                .collect(),
            events: self
                .events
                .iter()
                .map(|(k, f)| (k.clone(), fields(f)))
                .collect(),
            structs: self
                .structs
                .iter()
                .map(|(k, f)| (format!("{prefix}{k}"), fields(f)))
                .collect(),
            tables: self
                .tables
                .iter()
                .map(|(k, t)| {
                    let value = match &t.value {
                        TableValue::Type(ty) => TableValue::Type(ty.prefixed(prefix)),
                        TableValue::Fields(f) => TableValue::Fields(fields(f)),
                    };
                    let key = t.key.clone();
                    (k.clone(), Table { key, value })
                })
                .collect(),
        }
    }

    /// Parses a type as the command line spells it (`u64`, `name[]`, `Status`), a struct
    /// being one of this ABI's.
    pub fn parse_type(&self, text: &str) -> anyhow::Result<Type> {
        let structs: BTreeSet<&str> = self.structs.keys().map(String::as_str).collect();
        Type::parse(text, &structs)
    }

    /// The action `name`, or an error that lists the ones there are.
    pub fn action(&self, name: &str) -> anyhow::Result<&Entry> {
        self.actions.get(name).with_context(|| {
            format!(
                "the ABI has no action {name:?} (it has: {})",
                list(&self.actions)
            )
        })
    }

    /// The query `name`, or an error that lists the ones there are.
    pub fn query(&self, name: &str) -> anyhow::Result<&Entry> {
        self.queries.get(name).with_context(|| {
            format!(
                "the ABI has no query {name:?} (it has: {})",
                list(&self.queries)
            )
        })
    }

    /// Encodes the command line `args` of action `action`.
    pub fn encode(&self, action: &str, args: &[String]) -> anyhow::Result<Vec<u8>> {
        self.encode_args(action, self.action(action)?, args)
    }

    /// Encodes the command line `args` of query `method`.
    pub fn encode_query(&self, method: &str, args: &[String]) -> anyhow::Result<Vec<u8>> {
        self.encode_args(method, self.query(method)?, args)
    }

    /// Encodes one command line argument per field: a scalar as it is spelled (`alice`,
    /// `100`, hex for bytes), a list, option or struct as JSON.
    fn encode_args(&self, what: &str, entry: &Entry, args: &[String]) -> anyhow::Result<Vec<u8>> {
        if entry.args.len() != args.len() {
            let names: Vec<_> = entry
                .args
                .iter()
                .map(|f| format!("{}:{}", f.name, f.ty.spelling()))
                .collect();
            bail!(
                "{what} takes {} arguments ({}), got {}",
                entry.args.len(),
                names.join(" "),
                args.len()
            );
        }
        let mut out = Vec::new();
        for (f, arg) in entry.args.iter().zip(args) {
            let arg =
                &argument(arg).with_context(|| format!("{} ({})", f.name, f.ty.spelling()))?;
            let value = if f.ty.is_scalar() {
                Value::String(arg.clone())
            } else {
                serde_json::from_str(arg).map_err(|e| {
                    anyhow::anyhow!(
                        "{} ({}): {arg:?} is not JSON ({e}); write a list as [1,2], a struct as \
                         {{\"field\":value}}, no value of an option as null",
                        f.name,
                        f.ty.spelling()
                    )
                })?
            };
            self.encode_value(&f.ty, &value, &mut out)
                .with_context(|| format!("{} ({})", f.name, f.ty.spelling()))?;
        }
        Ok(out)
    }

    /// Appends the borsh encoding of `value`, a JSON value of type `ty`. Numbers may be JSON
    /// numbers or strings (a u128 beyond 2^64 must be a string).
    pub fn encode_value(&self, ty: &Type, value: &Value, out: &mut Vec<u8>) -> anyhow::Result<()> {
        fn int<T: std::str::FromStr>(value: &Value) -> anyhow::Result<T>
        where
            T::Err: std::fmt::Display,
        {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => bail!("{other} is not a number"),
            };
            text.parse::<T>().map_err(|e| {
                if text.starts_with('-') && text.parse::<i128>().is_ok() {
                    anyhow::anyhow!(
                        "{text} is out of range for this type (u8 to u128 take no negative numbers)"
                    )
                } else {
                    anyhow::anyhow!("{text:?}: {e}")
                }
            })
        }
        let text = |value: &Value| -> anyhow::Result<String> {
            match value {
                Value::String(s) => Ok(s.clone()),
                other => bail!("{other} is not a string"),
            }
        };
        match ty {
            Type::Bool => out.push(match value {
                Value::Bool(b) => u8::from(*b),
                Value::String(s) if s == "true" => 1,
                Value::String(s) if s == "false" => 0,
                other => bail!("{other} is not true or false"),
            }),
            Type::U8 => out.push(int::<u8>(value)?),
            Type::U16 => out.extend_from_slice(&int::<u16>(value)?.to_le_bytes()),
            Type::U32 => out.extend_from_slice(&int::<u32>(value)?.to_le_bytes()),
            Type::U64 => out.extend_from_slice(&int::<u64>(value)?.to_le_bytes()),
            Type::U128 => out.extend_from_slice(&int::<u128>(value)?.to_le_bytes()),
            Type::I32 => out.extend_from_slice(&int::<i32>(value)?.to_le_bytes()),
            Type::I64 => out.extend_from_slice(&int::<i64>(value)?.to_le_bytes()),
            Type::Name => out.extend_from_slice(&parse_name(&text(value)?)?.0.to_le_bytes()),
            Type::String => {
                let s = text(value)?;
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Type::Bytes => {
                let s = text(value)?;
                let bytes = hex::decode(s.strip_prefix("0x").unwrap_or(&s))
                    .map_err(|e| anyhow::anyhow!("{s:?} is not hex: {e}"))?;
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
            Type::List(item) => {
                let Value::Array(items) = value else {
                    bail!("{value} is not a list ([...])");
                };
                out.extend_from_slice(&(items.len() as u32).to_le_bytes());
                for (i, v) in items.iter().enumerate() {
                    self.encode_value(item, v, out)
                        .with_context(|| format!("item {i}"))?;
                }
            }
            Type::Option(inner) => match value {
                Value::Null => out.push(0),
                v => {
                    out.push(1);
                    self.encode_value(inner, v, out)?;
                }
            },
            Type::Struct(name) => {
                let Value::Object(given) = value else {
                    bail!("{value} is not a {name} ({{\"field\": value, ...}})");
                };
                let fields = &self.structs[name];
                for key in given.keys() {
                    if !fields.iter().any(|f| &f.name == key) {
                        bail!(
                            "{name} has no field {key:?} (it has: {})",
                            field_list(fields)
                        );
                    }
                }
                for f in fields {
                    let v = given
                        .get(&f.name)
                        .with_context(|| format!("{name} needs field {:?}", f.name))?;
                    self.encode_value(&f.ty, v, out)
                        .with_context(|| format!("{name}.{}", f.name))?;
                }
            }
        }
        Ok(())
    }

    /// Decodes `data` as exactly one value of `ty`, as JSON: names as text, bytes as hex,
    /// u128 as a decimal string (JSON readers lose integers past 2^53; u64 stays a number, as
    /// Rust's serde_json writes it).
    pub fn decode(&self, ty: &Type, data: &[u8]) -> anyhow::Result<Value> {
        let mut rest = data;
        let value = self.decode_value(ty, &mut rest)?;
        if !rest.is_empty() {
            bail!("{} bytes left over after a {}", rest.len(), ty.spelling());
        }
        Ok(value)
    }

    /// Decodes the fields of an event or a struct as exactly one JSON object.
    pub fn decode_fields(&self, fields: &[Field], data: &[u8]) -> anyhow::Result<Value> {
        let mut rest = data;
        let value = self.decode_record(fields, &mut rest)?;
        if !rest.is_empty() {
            bail!("{} bytes left over", rest.len());
        }
        Ok(value)
    }

    fn decode_record(&self, fields: &[Field], rest: &mut &[u8]) -> anyhow::Result<Value> {
        let mut m = Map::new();
        for f in fields {
            let v = self
                .decode_value(&f.ty, rest)
                .with_context(|| format!("field {}", f.name))?;
            m.insert(f.name.clone(), v);
        }
        Ok(Value::Object(m))
    }

    fn decode_value(&self, ty: &Type, rest: &mut &[u8]) -> anyhow::Result<Value> {
        fn take<'a>(rest: &mut &'a [u8], n: usize) -> anyhow::Result<&'a [u8]> {
            if rest.len() < n {
                bail!("the data ends inside a value");
            }
            let (head, tail) = rest.split_at(n);
            *rest = tail;
            Ok(head)
        }
        fn array<const N: usize>(rest: &mut &[u8]) -> anyhow::Result<[u8; N]> {
            Ok(take(rest, N)?.try_into().expect("N bytes"))
        }
        fn count(rest: &mut &[u8]) -> anyhow::Result<usize> {
            Ok(u32::from_le_bytes(array(rest)?) as usize)
        }
        Ok(match ty {
            Type::Bool => match take(rest, 1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => bail!("{b} is not a bool (0 or 1)"),
            },
            Type::U8 => take(rest, 1)?[0].into(),
            Type::U16 => u16::from_le_bytes(array(rest)?).into(),
            Type::U32 => u32::from_le_bytes(array(rest)?).into(),
            Type::U64 => u64::from_le_bytes(array(rest)?).into(),
            Type::U128 => u128::from_le_bytes(array(rest)?).to_string().into(),
            Type::I32 => i32::from_le_bytes(array(rest)?).into(),
            Type::I64 => i64::from_le_bytes(array(rest)?).into(),
            Type::Name => tally_host_api::Name(u64::from_le_bytes(array(rest)?))
                .to_string()
                .into(),
            Type::String => {
                let n = count(rest)?;
                let bytes = take(rest, n)?;
                std::str::from_utf8(bytes)
                    .map_err(|_| anyhow::anyhow!("a string that is not UTF-8"))?
                    .into()
            }
            Type::Bytes => {
                let n = count(rest)?;
                hex::encode(take(rest, n)?).into()
            }
            Type::List(item) => {
                let n = count(rest)?;
                // Every item takes at least one byte (no struct is empty), so a count beyond
                // what is left is refused before anything is allocated for it.
                if n > rest.len() {
                    bail!("a list of {n} items in {} bytes", rest.len());
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.decode_value(item, rest)?);
                }
                Value::Array(items)
            }
            Type::Option(inner) => match take(rest, 1)?[0] {
                0 => Value::Null,
                1 => self.decode_value(inner, rest)?,
                b => bail!("{b} is not an option's tag (0 or 1)"),
            },
            Type::Struct(name) => self.decode_record(&self.structs[name], rest)?,
        })
    }

    /// The table a stored `key` belongs to, with its key's parts: of the tables whose layout
    /// it fits exactly, the one with the longest prefix (then the first by name).
    pub fn table_of(&self, key: &[u8]) -> Option<(&str, &Table, Vec<Value>)> {
        let mut tables: Vec<(&String, &Table)> = self.tables.iter().collect();
        tables.sort_by_key(|(_, t)| std::cmp::Reverse(t.key.prefix.len()));
        tables.into_iter().find_map(|(name, table)| {
            let parts = self.decode_key(&table.key, key)?;
            Some((name.as_str(), table, parts))
        })
    }

    /// The parts of `key` if it has the layout `shape`, exactly.
    pub fn decode_key(&self, shape: &KeyShape, key: &[u8]) -> Option<Vec<Value>> {
        let mut rest = key.strip_prefix(shape.prefix.as_slice())?;
        let mut parts = Vec::with_capacity(shape.parts.len());
        for part in &shape.parts {
            parts.push(match part {
                // The last part, by the check at parse: the rest of the key, raw.
                Type::String => Value::String(std::str::from_utf8(rest).ok()?.to_string()),
                Type::Bytes => Value::String(format!("0x{}", hex::encode(rest))),
                fixed => self.decode_value(fixed, &mut rest).ok()?,
            });
            if matches!(part, Type::String | Type::Bytes) {
                rest = &[];
            }
        }
        rest.is_empty().then_some(parts)
    }

    /// The stored key of `table` with parts spelled `parts` (as on the command line).
    pub fn encode_key(&self, table: &str, parts: &[&str]) -> anyhow::Result<Vec<u8>> {
        let t = self.tables.get(table).with_context(|| {
            format!(
                "the ABI has no table {table:?} (it has: {})",
                list(&self.tables)
            )
        })?;
        if parts.len() != t.key.parts.len() {
            let types: Vec<String> = t.key.parts.iter().map(Type::spelling).collect();
            bail!(
                "table {table}'s keys have {} parts ({}), got {}: write {table}[{}]",
                t.key.parts.len(),
                types.join(", "),
                parts.len(),
                types.join(",")
            );
        }
        let mut key = t.key.prefix.clone();
        for (ty, text) in t.key.parts.iter().zip(parts) {
            match ty {
                Type::String => key.extend_from_slice(text.as_bytes()),
                Type::Bytes => key.extend_from_slice(
                    &hex::decode(text.strip_prefix("0x").unwrap_or(text))
                        .with_context(|| format!("{text:?} is not hex"))?,
                ),
                fixed => self
                    .encode_value(fixed, &Value::String(text.to_string()), &mut key)
                    .with_context(|| {
                        format!("table {table}: {text:?} as a {}", fixed.spelling())
                    })?,
            }
        }
        Ok(key)
    }

    /// A key of a table as `tally get` and `tally keys` print it: `balances[alice]`, or the
    /// table's name alone when its keys have no parts.
    pub fn key_text(table: &str, parts: &[Value]) -> String {
        if parts.is_empty() {
            return table.to_string();
        }
        let parts: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                other => text(other),
            })
            .collect();
        format!("{table}[{}]", parts.join(","))
    }

    /// A key written as a table's (`balances[alice]`, `stats`): `None` if `text` names no
    /// table of this ABI.
    pub fn parse_table_key(&self, text: &str) -> Option<anyhow::Result<Vec<u8>>> {
        let (table, parts) = match text.split_once('[') {
            Some((table, rest)) => (table, Some(rest)),
            None => (text, None),
        };
        let t = self.tables.get(table)?;
        Some(match parts {
            None => self.encode_key(table, &[]),
            Some(rest) => match rest.strip_suffix(']') {
                None => Err(anyhow::anyhow!(
                    "{text:?}: a table's key is written {table}[PART,...]"
                )),
                // string and bytes parts come last, so a comma inside one is its own.
                Some(inner) => {
                    let n = t.key.parts.len();
                    let mut parts: Vec<&str> = inner.split(',').collect();
                    if parts.len() > n
                        && matches!(t.key.parts.last(), Some(Type::String | Type::Bytes))
                    {
                        // After the (n-1)th comma: the string part takes the rest.
                        let cut = n
                            .checked_sub(2)
                            .and_then(|k| inner.match_indices(',').nth(k))
                            .map_or(0, |(i, _)| i + 1);
                        parts.truncate(n - 1);
                        parts.push(&inner[cut..]);
                    }
                    self.encode_key(table, &parts)
                }
            },
        })
    }

    /// Decodes a value stored in `table`.
    pub fn decode_table_value(&self, table: &Table, data: &[u8]) -> anyhow::Result<Value> {
        match &table.value {
            TableValue::Type(ty) => self.decode(ty, data),
            TableValue::Fields(fields) => self.decode_fields(fields, data),
        }
    }

    /// The structs in an order where each comes after those it contains, as generated C
    /// must define them (the cycle check guarantees there is one).
    pub fn struct_order(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        fn place<'a>(abi: &'a Abi, name: &'a str, out: &mut Vec<&'a str>) {
            if out.contains(&name) {
                return;
            }
            for f in &abi.structs[name] {
                let mut inner = Vec::new();
                f.ty.structs(&mut inner);
                for s in inner {
                    place(abi, s, out);
                }
            }
            out.push(name);
        }
        for name in self.structs.keys() {
            place(self, name, &mut out);
        }
        out
    }
}

/// Largest file an `@PATH` argument may name: a transaction carries at most a few hundred
/// KiB of action data (the node's size limits), so a larger file is a mistake.
const MAX_ARGUMENT_FILE: u64 = 1 << 20;

/// A command line argument's text: `@PATH` is the contents of the file PATH less one trailing
/// newline (as `echo` and editors leave), `@@TEXT` the text `@TEXT`, anything else itself.
pub fn argument(arg: &str) -> anyhow::Result<String> {
    if let Some(literal) = arg.strip_prefix("@@") {
        return Ok(format!("@{literal}"));
    }
    let Some(path) = arg.strip_prefix('@') else {
        return Ok(arg.to_string());
    };
    let meta = std::fs::metadata(path).with_context(|| {
        format!("cannot read {path:?} (an argument @PATH is read from that file; write @@ for a literal @)")
    })?;
    if meta.len() > MAX_ARGUMENT_FILE {
        bail!(
            "{path} has {} bytes: an argument file may have at most {MAX_ARGUMENT_FILE}",
            meta.len()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {path:?} as UTF-8 text (write bytes as hex)"))?;
    let text = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    Ok(text.to_string())
}

/// An event's data as the emitting contract's ABI declares it; `None` when there is no ABI,
/// it declares no such event, or the data does not match (the caller shows hex instead).
pub fn event_value(abi: Option<&Abi>, event: &str, data: &[u8]) -> Option<Value> {
    let fields = abi?.events.get(event)?;
    abi?.decode_fields(fields, data).ok()
}

/// A value as one line of text: JSON, compact.
pub fn text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value serializes")
}

fn list<T>(map: &BTreeMap<String, T>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn field_list(fields: &[Field]) -> String {
    fields
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `name` is an identifier: letters, digits and `_`, not first a digit.
fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A table: `{"key": TYPE or {"prefix": TEXT, "parts": [TYPE, ...]}, "value": TYPE or FIELDS}`.
fn table(value: &Value, structs: &BTreeSet<&str>) -> anyhow::Result<Table> {
    let Value::Object(m) = value else {
        bail!("a table is {{\"key\": KEY, \"value\": TYPE}}");
    };
    if let Some(k) = m.keys().find(|k| *k != "key" && *k != "value") {
        bail!("unknown key {k:?} (a table has \"key\" and \"value\")");
    }
    let key = match m.get("key") {
        Some(Value::String(t)) => KeyShape {
            prefix: Vec::new(),
            parts: vec![Type::parse(t, structs).context("\"key\"")?],
        },
        Some(Value::Object(shape)) => {
            if let Some(k) = shape.keys().find(|k| *k != "prefix" && *k != "parts") {
                bail!("\"key\" has an unknown key {k:?} (it has \"prefix\" and \"parts\")");
            }
            let prefix = match shape.get("prefix") {
                None => Vec::new(),
                Some(Value::String(p)) => p.as_bytes().to_vec(),
                Some(other) => bail!("\"prefix\" is text, not {other}"),
            };
            let parts = match shape.get("parts") {
                None => Vec::new(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|p| match p {
                        Value::String(t) => Type::parse(t, structs),
                        other => bail!("a key part is a type name, not {other}"),
                    })
                    .collect::<anyhow::Result<_>>()
                    .context("\"parts\"")?,
                Some(other) => bail!("\"parts\" is a list of types, not {other}"),
            };
            KeyShape { prefix, parts }
        }
        None => bail!("a table needs \"key\": a type (\"name\") or {{\"prefix\", \"parts\"}}"),
        Some(other) => bail!("\"key\" is a type or {{\"prefix\", \"parts\"}}, not {other}"),
    };
    if key.prefix.is_empty() && key.parts.is_empty() {
        bail!("\"key\" has neither a prefix nor parts: it would be the empty key");
    }
    for (i, part) in key.parts.iter().enumerate() {
        let last = i + 1 == key.parts.len();
        let ok = match part {
            Type::String | Type::Bytes => last,
            other => other.is_scalar(),
        };
        if !ok {
            bail!(
                "key part {} ({}): a key part is a fixed-size built-in type (bool, integers, \
                 name), or string or bytes as the last part (they run to the end of the key)",
                i + 1,
                part.spelling()
            );
        }
    }
    let value = match m.get("value") {
        Some(Value::String(t)) => TableValue::Type(Type::parse(t, structs).context("\"value\"")?),
        Some(v @ Value::Array(_)) => TableValue::Fields(fields(v, structs).context("\"value\"")?),
        None => bail!("a table needs \"value\": a type, or a list of fields"),
        Some(other) => bail!("\"value\" is a type or a list of fields, not {other}"),
    };
    Ok(Table { key, value })
}

/// An action or a query: a list of fields, or `{"args": [...], "returns": TYPE}`.
fn entry(value: Value, structs: &BTreeSet<&str>) -> anyhow::Result<Entry> {
    match value {
        Value::Array(_) => Ok(Entry {
            args: fields(&value, structs)?,
            returns: None,
        }),
        Value::Object(m) => {
            for key in m.keys() {
                if key != "args" && key != "returns" {
                    bail!("unknown key {key:?} (an entry has \"args\" and \"returns\")");
                }
            }
            let args = match m.get("args") {
                Some(a) => fields(a, structs)?,
                None => Vec::new(),
            };
            let returns = match m.get("returns") {
                None => None,
                Some(Value::String(t)) => Some(Type::parse(t, structs).context("\"returns\"")?),
                Some(other) => bail!("\"returns\" must be a type name, not {other}"),
            };
            Ok(Entry { args, returns })
        }
        other => bail!("{other} is neither a list of fields nor {{\"args\", \"returns\"}}"),
    }
}

/// A list of `{"name": FIELD, "type": TYPE}`, each name an identifier, none twice.
fn fields(value: &Value, structs: &BTreeSet<&str>) -> anyhow::Result<Vec<Field>> {
    let Value::Array(items) = value else {
        bail!("fields are a list of {{\"name\": FIELD, \"type\": TYPE}}");
    };
    let mut out: Vec<Field> = Vec::new();
    for item in items {
        let (Some(Value::String(name)), Some(Value::String(ty))) =
            (item.get("name"), item.get("type"))
        else {
            bail!("{item} is not {{\"name\": FIELD, \"type\": TYPE}}");
        };
        if let Value::Object(m) = item
            && let Some(key) = m.keys().find(|k| *k != "name" && *k != "type")
        {
            bail!("field {name:?} has an unknown key {key:?}");
        }
        if !is_identifier(name) {
            bail!("field {name:?} is not an identifier (letters, digits and _, not first a digit)");
        }
        if out.iter().any(|f| &f.name == name) {
            bail!("two fields named {name:?}");
        }
        let ty = Type::parse(ty, structs).with_context(|| format!("field {name}"))?;
        out.push(Field {
            name: name.clone(),
            ty,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL: &str = r#"{
        "structs": {
            "Reserves": [{ "name": "a", "type": "u64" }, { "name": "b", "type": "u64" }],
            "Book": [{ "name": "levels", "type": "Reserves[]" }, { "name": "note", "type": "string?" }]
        },
        "actions": {
            "swap": { "args": [{ "name": "user", "type": "name" }], "returns": "u64" },
            "init": [{ "name": "token_a", "type": "name" }, { "name": "flag", "type": "bool" }]
        },
        "queries": { "reserves": { "returns": "Reserves" } },
        "events": { "swapped": [{ "name": "user", "type": "name" }, { "name": "out", "type": "u128" }] }
    }"#;

    #[test]
    fn every_section_parses_and_old_files_still_do() {
        let abi = Abi::parse(POOL).unwrap();
        assert_eq!(abi.actions["swap"].returns, Some(Type::U64));
        assert_eq!(abi.actions["init"].returns, None);
        assert_eq!(
            abi.queries["reserves"].returns,
            Some(Type::Struct("Reserves".into()))
        );
        assert_eq!(
            abi.structs["Book"][0].ty,
            Type::List(Box::new(Type::Struct("Reserves".into())))
        );
        assert_eq!(abi.struct_order(), vec!["Reserves", "Book"]);
        let old = Abi::parse(r#"{"actions": {"hi": [{"name": "who", "type": "name"}]}}"#).unwrap();
        assert_eq!(old.actions["hi"].args[0].ty, Type::Name);
    }

    #[test]
    fn mistakes_are_refused_with_what_is_wrong() {
        let bad = |text: &str, want: &str| {
            let e = format!("{:#}", Abi::parse(text).unwrap_err());
            assert!(e.contains(want), "{e:?} does not say {want:?}");
        };
        bad(r#"{"action": {}}"#, "unknown section \"action\"");
        bad(
            r#"{"actions": {"a": [{"name": "x", "type": "u63"}]}}"#,
            "unknown type \"u63\"",
        );
        bad(r#"{"structs": {"S": []}}"#, "struct S has no fields");
        bad(
            r#"{"structs": {"s": [{"name": "x", "type": "u8"}]}}"#,
            "CamelCase",
        );
        bad(
            r#"{"structs": {"A": [{"name": "b", "type": "B[]"}], "B": [{"name": "a", "type": "A?"}]}}"#,
            "A → B → A",
        );
        bad(
            r#"{"actions": {"a": {"args": [], "return": "u8"}}}"#,
            "unknown key \"return\"",
        );
        bad(
            r#"{"actions": {"a": [{"name": "x", "type": "u8"}, {"name": "x", "type": "u8"}]}}"#,
            "two fields named \"x\"",
        );
        bad(r#"{"actions": {"A": []}}"#, "not a valid name");
        bad(
            r#"{"actions": {"a": [{"name": "x", "type": "u8[][][][][][][][][][]"}]}}"#,
            "nests more than 8",
        );
    }

    #[test]
    fn values_round_trip_through_borsh() {
        let abi = Abi::parse(POOL).unwrap();
        let book = Type::Struct("Book".into());
        let value: Value = serde_json::from_str(
            r#"{"levels": [{"a": 1, "b": "18446744073709551615"}], "note": "hi"}"#,
        )
        .unwrap();
        let mut bytes = Vec::new();
        abi.encode_value(&book, &value, &mut bytes).unwrap();
        assert_eq!(bytes.len(), 4 + 16 + 1 + 4 + 2);
        let back = abi.decode(&book, &bytes).unwrap();
        assert_eq!(back["levels"][0]["b"], Value::from(u64::MAX));
        assert_eq!(back["note"], "hi");
        assert!(abi.decode(&book, &bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(abi.decode(&book, &long).is_err());
        // A count far beyond the data allocates nothing and fails.
        let huge = [0xff, 0xff, 0xff, 0xff];
        assert!(abi.decode(&Type::List(Box::new(Type::U8)), &huge).is_err());
        let big = Type::U128;
        let mut b = Vec::new();
        abi.encode_value(
            &big,
            &Value::from("340282366920938463463374607431768211455"),
            &mut b,
        )
        .unwrap();
        assert_eq!(abi.decode(&big, &b).unwrap(), u128::MAX.to_string());
    }

    const TABLES: &str = r#"{
        "structs": { "Order": [{ "name": "amount", "type": "u64" }] },
        "tables": {
            "balances": { "key": "name", "value": "u64" },
            "stats": { "key": { "prefix": "stats" }, "value": [{ "name": "supply", "type": "u64" }] },
            "orders": { "key": { "prefix": "o", "parts": ["name", "u32", "string"] }, "value": "Order" }
        }
    }"#;

    #[test]
    fn table_keys_round_trip_between_their_text_and_their_bytes() {
        let abi = Abi::parse(TABLES).unwrap();
        let alice = parse_name("alice").unwrap().0.to_le_bytes();
        let key = abi.parse_table_key("balances[alice]").unwrap().unwrap();
        assert_eq!(key, alice);
        let (table, _, parts) = abi.table_of(&key).unwrap();
        assert_eq!(Abi::key_text(table, &parts), "balances[alice]");
        // The last part is a string's raw bytes, commas included.
        let key = abi.parse_table_key("orders[bob,7,a,b]").unwrap().unwrap();
        let mut want = b"o".to_vec();
        want.extend_from_slice(&parse_name("bob").unwrap().0.to_le_bytes());
        want.extend_from_slice(&7u32.to_le_bytes());
        want.extend_from_slice(b"a,b");
        assert_eq!(key, want);
        let (table, t, parts) = abi.table_of(&key).unwrap();
        assert_eq!(Abi::key_text(table, &parts), "orders[bob,7,a,b]");
        let value = abi.decode_table_value(t, &9u64.to_le_bytes()).unwrap();
        assert_eq!(value, serde_json::json!({"amount": 9}));
        // A singleton: the table's name alone.
        assert_eq!(abi.parse_table_key("stats").unwrap().unwrap(), b"stats");
        let (table, _, parts) = abi.table_of(b"stats").unwrap();
        assert_eq!(Abi::key_text(table, &parts), "stats");
        let one = Abi::parse(r#"{"tables": {"notes": {"key": "string", "value": "u8"}}}"#).unwrap();
        assert_eq!(one.parse_table_key("notes[a,b]").unwrap().unwrap(), b"a,b");
        // Keys that fit no table, and names that are no table.
        assert!(abi.table_of(b"stat").is_none());
        assert!(abi.table_of(&[0; 9]).is_none());
        assert!(abi.parse_table_key("nope[x]").is_none());
        let e = format!(
            "{:#}",
            abi.parse_table_key("balances[a,b]").unwrap().unwrap_err()
        );
        assert!(e.contains("1 parts (name), got 2"), "{e}");
    }

    #[test]
    fn a_key_belongs_to_the_table_with_the_longest_prefix_it_fits() {
        let abi = Abi::parse(
            r#"{"tables": {
                "all": { "key": "bytes", "value": "bytes" },
                "users": { "key": { "prefix": "u", "parts": ["name"] }, "value": "u64" }
            }}"#,
        )
        .unwrap();
        let mut user = b"u".to_vec();
        user.extend_from_slice(&parse_name("carol").unwrap().0.to_le_bytes());
        assert_eq!(abi.table_of(&user).unwrap().0, "users");
        assert_eq!(abi.table_of(b"u1").unwrap().0, "all");
    }

    #[test]
    fn table_mistakes_are_refused_with_what_is_wrong() {
        let bad = |text: &str, want: &str| {
            let e = format!("{:#}", Abi::parse(text).unwrap_err());
            assert!(e.contains(want), "{e:?} does not say {want:?}");
        };
        bad(
            r#"{"tables": {"t": {"key": {"parts": ["string", "u8"]}, "value": "u8"}}}"#,
            "or string or bytes as the last part",
        );
        bad(
            r#"{"tables": {"t": {"key": {"parts": ["u8[]"]}, "value": "u8"}}}"#,
            "key part 1 (u8[])",
        );
        bad(
            r#"{"tables": {"t": {"key": {}, "value": "u8"}}}"#,
            "the empty key",
        );
        bad(r#"{"tables": {"t": {"key": "name"}}}"#, "needs \"value\"");
        bad(
            r#"{"tables": {"t": {"key": "name", "value": "u8", "index": 1}}}"#,
            "unknown key \"index\"",
        );
        bad(
            r#"{"tables": {"t": {"key": "Missing", "value": "u8"}}}"#,
            "unknown type \"Missing\"",
        );
        bad(
            r#"{"tables": {"a-b": {"key": "name", "value": "u8"}}}"#,
            "identifier",
        );
    }

    #[test]
    fn command_line_arguments_are_plain_scalars_or_json() {
        let abi = Abi::parse(POOL).unwrap();
        let data = abi
            .encode("init", &["alice".into(), "true".into()])
            .unwrap();
        assert_eq!(data.len(), 9);
        assert_eq!(data[8], 1);
        let e = format!("{:#}", abi.encode("init", &["alice".into()]).unwrap_err());
        assert!(
            e.contains("takes 2 arguments (token_a:name flag:bool)"),
            "{e}"
        );
        let e = format!("{:#}", abi.encode("nope", &[]).unwrap_err());
        assert!(e.contains("it has: init, swap"), "{e}");
        assert!(abi.encode_query("reserves", &[]).unwrap().is_empty());
        let e = format!("{:#}", abi.encode("swap", &["-1".into()]).unwrap_err());
        assert!(!e.contains("negative"), "{e}");
        let amount = Abi::parse(r#"{"actions": {"pay": [{"name": "n", "type": "u64"}]}}"#).unwrap();
        let e = format!("{:#}", amount.encode("pay", &["-5".into()]).unwrap_err());
        assert!(e.contains("take no negative numbers"), "{e}");
    }
}
