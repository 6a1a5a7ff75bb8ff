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
//!   "events": { "swapped": [{ "name": "user", "type": "name" }, { "name": "out", "type": "u64" }] }
//! }
//! ```
//!
//! An action or a query is either its argument list (no return data) or `{"args", "returns"}`
//! (Antelope's ABI keeps action results in a list of their own; one entry per action reads
//! better and cannot drift from the action). Every value is borsh: integers little-endian,
//! `name` 8 bytes, `string`/`bytes` and lists `T[]` after a u32 count, options `T?` after a
//! 0/1 byte, a struct its fields in order.

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
}

/// The keys an ABI file may have at its top.
const SECTIONS: [&str; 4] = ["structs", "actions", "queries", "events"];

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
            text.parse::<T>()
                .map_err(|e| anyhow::anyhow!("{text:?}: {e}"))
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
        let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
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
    }
}
