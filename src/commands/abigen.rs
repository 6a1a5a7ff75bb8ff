//! `tally abigen`: generate a contract's action types, readers and writers from its ABI file,
//! for C (a header over `tally.h`) or Rust (a module over `tally_host_api::message`).
//!
//! Both sides read an action's data the same way: field by field in ABI order, strictly (no
//! bytes left over, strings in UTF-8), aborting with the same messages.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use tally_host_api::Name;

use super::abi::{Abi, Field, Type};

/// The language to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// C, on sdk-c's tally.h (built with clang).
    C,
    /// Rust, on tally-host-api (a contract uses its `guest` feature).
    Rust,
}

impl Lang {
    fn label(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Rust => "rust",
        }
    }
}

/// Generate action types from a contract's ABI file.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally abigen counter.abi.json --lang c -o counter.abi.h
  tally abigen counter.abi.json --lang rust -o src/abi.rs
  tally abigen counter.abi.json --lang rust -o src/abi.rs --check   # fails if out of date
  tally abigen swap.abi.json --lang c --prefix swap_ -o swap.abi.h   # to call swap from C

C: one struct per action with _unpack, _pack, _packed_size and _read (the action's whole
message, strictly), and <abi>_dispatch, which routes apply to your static on_<action>
handlers (define TALLY_NO_DISPATCH before the include to leave it out).
Rust: one struct per action (borsh derives) and an `Action` enum; pass your handler to
tally_host_api::contract! and it receives the decoded Action.
Tables (what the contract stores, for `tally get` and `tally keys`) are checked and generate
no code.
Rerun after every change to the ABI; commit the output beside it.")]
pub struct AbigenArgs {
    /// The ABI file: {\"actions\": {\"NAME\": [{\"name\": FIELD, \"type\": TYPE}, ...]}}.
    pub abi: PathBuf,
    /// The language to generate.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// Where to write [default: stdout].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Write nothing; fail if OUTPUT differs from what would be generated.
    #[arg(long, requires = "output")]
    pub check: bool,
    /// C only: put PREFIX before every generated type, function and constant (`swap_` gives
    /// `swap_Init`, `swap_Swap_call`, `SWAP_ACTION_INIT`), so that a contract can include the
    /// headers of several contracts whose names clash (every contract has an `init`).
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,
}

pub fn run(args: AbigenArgs) -> anyhow::Result<()> {
    let abi = Abi::read(&args.abi)?;
    let source = Source {
        file: file_name(&args.abi),
        path: source_path(&args.abi, args.output.as_deref())?,
    };
    let stem = abi_stem(&args.abi);
    let prefix = args.prefix.as_deref().unwrap_or("");
    if !prefix.is_empty() && args.lang != Lang::C {
        bail!("--prefix is for C, whose names share one namespace; Rust has modules");
    }
    let text = generate(&abi, args.lang, &stem, &source, prefix)?;
    let Some(out) = &args.output else {
        print!("{text}");
        return Ok(());
    };
    let rerun = format!(
        "tally abigen {} --lang {}{} -o {}",
        args.abi.display(),
        args.lang.label(),
        if prefix.is_empty() {
            String::new()
        } else {
            format!(" --prefix {prefix}")
        },
        out.display()
    );
    if args.check {
        let current = std::fs::read_to_string(out).unwrap_or_default();
        if current != text {
            bail!(
                "{} is out of date with {}: run `{rerun}`",
                out.display(),
                args.abi.display()
            );
        }
        println!("{} is up to date", out.display());
        return Ok(());
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(out, &text).with_context(|| format!("cannot write {}", out.display()))?;
    let count =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    println!(
        "wrote {} ({}, {}, {}, {}; {}) from {}",
        out.display(),
        count(abi.actions.len(), "action", "actions"),
        count(abi.queries.len(), "query", "queries"),
        count(abi.events.len(), "event", "events"),
        count(abi.structs.len(), "struct", "structs"),
        args.lang.label(),
        args.abi.display()
    );
    Ok(())
}

/// Where a generated file says it came from.
pub struct Source {
    /// The ABI's file name.
    pub file: String,
    /// Its path relative to the generated file's directory (CI regenerates from it).
    pub path: String,
}

/// rustfmt's default `struct_lit_width`: a struct literal whose fields fit in this many
/// characters stays on one line.
const RUSTFMT_STRUCT_LIT_WIDTH: usize = 18;
fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// The ABI's path as the generated file names it: relative to the output's directory, so the
/// text does not depend on where the checkout lives or where abigen ran.
fn source_path(abi: &Path, output: Option<&Path>) -> anyhow::Result<String> {
    let abi_abs = abi
        .canonicalize()
        .with_context(|| format!("cannot find {}", abi.display()))?;
    let file_name = || file_name(&abi_abs);
    let Some(output) = output else {
        return Ok(file_name());
    };
    let out_dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(out_dir) = out_dir.canonicalize() else {
        // The output's directory does not exist yet: nothing to be relative to.
        return Ok(file_name());
    };
    Ok(relative(&abi_abs, &out_dir)
        .to_string_lossy()
        .replace('\\', "/"))
}

/// `path` relative to the directory `base` (both absolute).
fn relative(path: &Path, base: &Path) -> PathBuf {
    let path: Vec<Component> = path.components().collect();
    let base: Vec<Component> = base.components().collect();
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for c in &path[common..] {
        out.push(c);
    }
    out
}

/// `contracts/token-rs.abi.json` → `token_rs`: the prefix of the C dispatch function.
fn abi_stem(abi: &Path) -> String {
    let name = abi
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let stem = name
        .strip_suffix(".abi.json")
        .or_else(|| name.strip_suffix(".json"))
        .unwrap_or(&name);
    let mut id: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    id
}

/// Keywords a C field cannot be named (C99 and C11).
const C_KEYWORDS: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "_Bool",
    "_Complex",
    "_Imaginary",
    "_Alignas",
    "_Alignof",
    "_Atomic",
    "_Generic",
    "_Noreturn",
    "_Static_assert",
    "_Thread_local",
];

/// Rust keywords (2024 edition, strict and reserved), written as raw identifiers.
const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where",
    "while", "abstract", "become", "box", "do", "final", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];

/// Types an action's struct cannot be called, in either language, so one ABI generates for
/// both: tally.h's, and those the generated Rust module names or imports.
const RESERVED_TYPES: &[&str] = &[
    "Action",
    "Actions",
    "ActionData",
    "Query",
    "Queries",
    "QueryData",
    "Event",
    "Events",
    "EventData",
    "Message",
    "Field",
    "DecodeError",
    "Reader",
    "Name",
    "String",
    "Vec",
    "Result",
    "Option",
    "Ok",
    "Err",
    "Some",
    "None",
    "Self",
    "AccountName",
    "Bytes",
    "DataStream",
    "WriteStream",
    "ApplyContext",
];

/// What an item of the ABI is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Struct,
    Action,
    Query,
    Event,
}

/// One struct, action, query or event, with the identifiers both languages use for it.
struct Item<'a> {
    kind: Kind,
    /// Its name in the ABI.
    name: &'a str,
    /// Its name on chain (not for structs).
    value: Name,
    /// `transfer` → `Transfer`, query `balance` → `BalanceQuery`, event `swapped` →
    /// `SwappedEvent`, struct `Reserves` → `Reserves`: the generated type.
    type_name: String,
    /// `transfer` → `Transfer`, `set.owner` → `SetOwner`: the variant of the Rust enum.
    variant: String,
    /// `set.owner` → `set_owner`: for C's `on_`, `ACTION_`, `QUERY_` and `EVENT_`.
    snake: String,
    /// What C puts before its constants (`SWAP_` for `--prefix swap_`).
    const_prefix: String,
    fields: &'a [Field],
    returns: Option<&'a Type>,
}

/// Names that cannot be raw identifiers in Rust.
const RUST_UNRAW: &[&str] = &["self", "Self", "super", "crate", "_"];

/// `set.owner` → `SetOwner`.
fn pascal(name: &str) -> String {
    name.split('.')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

/// Every item of `abi`, structs first (each after those it contains), then actions, queries
/// and events, with their generated names checked against each other and both languages.
fn items(abi: &Abi) -> anyhow::Result<Vec<Item<'_>>> {
    if abi.actions.is_empty() && abi.queries.is_empty() && abi.events.is_empty() {
        bail!("the ABI has no actions, queries or events: add one under \"actions\"");
    }
    let mut out = Vec::new();
    for name in abi.struct_order() {
        out.push(Item {
            kind: Kind::Struct,
            name,
            value: Name(0),
            type_name: name.to_string(),
            variant: name.to_string(),
            snake: name.to_string(),
            const_prefix: String::new(),
            fields: &abi.structs[name],
            returns: None,
        });
    }
    let named = abi
        .actions
        .iter()
        .map(|(n, e)| (Kind::Action, n, e.args.as_slice(), e.returns.as_ref()))
        .chain(
            abi.queries
                .iter()
                .map(|(n, e)| (Kind::Query, n, e.args.as_slice(), e.returns.as_ref())),
        )
        .chain(
            abi.events
                .iter()
                .map(|(n, f)| (Kind::Event, n, f.as_slice(), None)),
        );
    for (kind, name, fields, returns) in named {
        let value: Name = name.parse().map_err(|e| anyhow::anyhow!("{name:?}: {e}"))?;
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            bail!("{name:?}: a generated type cannot start with a digit; rename it");
        }
        let variant = pascal(name);
        let type_name = match kind {
            Kind::Query => format!("{variant}Query"),
            Kind::Event => format!("{variant}Event"),
            _ => variant.clone(),
        };
        out.push(Item {
            kind,
            name,
            value,
            type_name,
            variant,
            snake: name.replace('.', "_"),
            const_prefix: String::new(),
            fields,
            returns,
        });
    }
    let mut by_type: BTreeMap<&str, &str> = BTreeMap::new();
    for item in &out {
        let t = item.type_name.as_str();
        if RESERVED_TYPES.contains(&t) {
            bail!(
                "{:?}: its generated type {t} would clash with a type of tally.h or the generated \
                 Rust module; rename it",
                item.name
            );
        }
        if let Some(other) = by_type.insert(t, item.name) {
            bail!("{other:?} and {:?} would both generate type {t}", item.name);
        }
    }
    Ok(out)
}

/// The generated file for `abi` in `lang`, every C name after `prefix` (empty: none).
pub fn generate(
    abi: &Abi,
    lang: Lang,
    stem: &str,
    source: &Source,
    prefix: &str,
) -> anyhow::Result<String> {
    if lang == Lang::Rust {
        return rust_module(&items(abi)?, source);
    }
    if prefix.is_empty() {
        return c_header(abi, &items(abi)?, stem, source, "");
    }
    let ok = prefix.starts_with(|c: char| c.is_ascii_alphabetic())
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        bail!("--prefix {prefix:?} must start a C identifier: letters, digits and _");
    }
    let abi = abi.with_struct_prefix(prefix);
    let mut items = items(&abi)?;
    for item in &mut items {
        if item.kind != Kind::Struct {
            item.type_name = format!("{prefix}{}", item.type_name);
            item.const_prefix = prefix.to_ascii_uppercase();
        }
    }
    c_header(&abi, &items, stem, source, prefix)
}

// ---- C ----------------------------------------------------------------------------------

/// `u64` → `u64`, `Reserves[]` → `list_Reserves`: a type's part of a generated C name.
fn c_mangle(ty: &Type) -> String {
    match ty {
        Type::List(t) => format!("list_{}", c_mangle(t)),
        Type::Option(t) => format!("opt_{}", c_mangle(t)),
        other => other.spelling(),
    }
}

/// A field's C type.
fn c_type(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::U8 => "uint8_t".into(),
        Type::U16 => "uint16_t".into(),
        Type::U32 => "uint32_t".into(),
        Type::U64 => "uint64_t".into(),
        Type::U128 => "__uint128_t".into(),
        Type::I32 => "int32_t".into(),
        Type::I64 => "int64_t".into(),
        Type::Name => "AccountName".into(),
        Type::String => "String *".into(),
        Type::Bytes => "Bytes *".into(),
        Type::List(t) => format!("List_{}", c_mangle(t)),
        Type::Option(t) => format!("Option_{}", c_mangle(t)),
        Type::Struct(s) => s.clone(),
    }
}

/// Whether C passes the type by pointer (a struct: a generated one, a list or an option).
fn c_by_pointer(ty: &Type) -> bool {
    matches!(ty, Type::List(_) | Type::Option(_) | Type::Struct(_))
}

/// The prefix of the type's `_unpack` and `_pack`.
fn c_codec(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::U8 => "uint8".into(),
        Type::U16 => "uint16".into(),
        Type::U32 => "uint32".into(),
        Type::U64 => "uint64".into(),
        Type::U128 => "uint128".into(),
        Type::I32 => "int32".into(),
        Type::I64 => "int64".into(),
        Type::Name => "AccountName".into(),
        Type::String => "String".into(),
        Type::Bytes => "Bytes".into(),
        other => c_type(other),
    }
}

/// The statement that unpacks a value of `ty` from `ds` into the lvalue `dst`.
fn c_unpack(ty: &Type, ds: &str, dst: &str) -> String {
    match ty {
        // Strings are checked as UTF-8 where they are read, as Rust's String is.
        Type::String => format!("String_unpack_utf8({ds}, &{dst});"),
        other => format!("{}_unpack({ds}, &{dst});", c_codec(other)),
    }
}

/// The statement that packs the value `v` of `ty` into `ws`.
fn c_pack(ty: &Type, ws: &str, v: &str) -> String {
    if c_by_pointer(ty) {
        format!("{}_pack({ws}, &{v});", c_codec(ty))
    } else {
        format!("{}_pack({ws}, {v});", c_codec(ty))
    }
}

/// The expression for the packed size of the value `v` of `ty`.
fn c_size(abi: &Abi, ty: &Type, v: &str) -> String {
    match ty {
        Type::String | Type::Bytes => format!("4 + {v}->len"),
        t if c_by_pointer(t) => match t.fixed_size(abi) {
            Some(n) => n.to_string(),
            None => format!("{}_packed_size(&{v})", c_codec(t)),
        },
        t => t.fixed_size(abi).expect("a scalar has a size").to_string(),
    }
}

/// A parameter of type `ty` named `name` (by pointer for structs).
fn c_param(ty: &Type, name: &str) -> String {
    let t = c_type(ty);
    if c_by_pointer(ty) {
        format!("const {t} *{name}")
    } else if t.ends_with('*') {
        format!("const {t}{name}")
    } else {
        format!("{t} {name}")
    }
}

fn c_header(
    abi: &Abi,
    items: &[Item],
    stem: &str,
    source: &Source,
    prefix: &str,
) -> anyhow::Result<String> {
    for item in items {
        for f in item.fields {
            if C_KEYWORDS.contains(&f.name.as_str()) {
                bail!(
                    "field {}.{} is a C keyword; rename it in the ABI",
                    item.name,
                    f.name
                );
            }
        }
    }
    let guard = format!("{}_ABI_H", stem.to_ascii_uppercase());
    let mut h = String::new();
    c_preamble(&mut h, stem, source, &guard, prefix);
    let mut defined = BTreeSet::new();
    for item in items {
        let mut used = Vec::new();
        for f in item.fields {
            composites(&f.ty, &mut used);
        }
        if let Some(r) = item.returns {
            composites(r, &mut used);
        }
        for ty in used {
            if defined.insert(c_type(ty)) {
                c_composite(&mut h, abi, ty);
            }
        }
        c_item_types(&mut h, item);
        c_item_codecs(&mut h, abi, item);
        c_item_calls(&mut h, abi, item);
    }
    c_dispatch(&mut h, items, stem, Kind::Action);
    c_dispatch(&mut h, items, stem, Kind::Query);
    let w = &mut h;
    writeln!(w).unwrap();
    writeln!(w, "#endif /* {guard} */").unwrap();
    Ok(h)
}

/// The lists and options inside `ty`, innermost first (each needs its items' type first).
fn composites<'a>(ty: &'a Type, out: &mut Vec<&'a Type>) {
    if let Type::List(inner) | Type::Option(inner) = ty {
        composites(inner, out);
        out.push(ty);
    }
}

/// The header's comment, include guard and include.
fn c_preamble(w: &mut String, stem: &str, source: &Source, guard: &str, prefix: &str) {
    let upper = stem.to_ascii_uppercase();
    for line in [
        format!("/* The ABI of {}, for a C contract.", source.file),
        " *".into(),
        format!(
            " * Generated by tally abigen from {} (--lang c{})",
            source.path,
            if prefix.is_empty() {
                String::new()
            } else {
                format!(" --prefix {prefix}")
            }
        ),
        " * Do not edit: change the ABI and run tally abigen again (CI checks this file is current)."
            .into(),
        " *".into(),
        " * Per struct, action, query and event: a C struct in borsh field order; _unpack reads it"
            .into(),
        " * from a DataStream, _pack writes it to a WriteStream, _packed_size is its size. String"
            .into(),
        " * and Bytes fields point into the buffer they were read from. A list is its items' borsh"
            .into(),
        " * bytes (read them with the item's _unpack, len times); an option is `some` and a value."
            .into(),
        " *".into(),
        " * This contract's side: _read reads the running action's or query's whole message".into(),
        " * strictly (as a Rust contract does: no bytes left over, strings in UTF-8); _reply sets"
            .into(),
        " * the return data; _emit emits an event. Dispatch: {stem}_dispatch routes apply to the"
            .replace("{stem}", stem),
        " * static on_<action> handlers you define, {stem}_query_dispatch routes query to the"
            .replace("{stem}", stem),
        " * static answer_<query> handlers.".into(),
        " *".into(),
        " * A caller's side: _call calls the action on a contract, _ask asks the query; each".into(),
        " * returns 0 or the callee's abort code, and decodes the return data into `out`.".into(),
        format!(
            " * To call this contract from another, define {upper}_NO_DISPATCH before the include."
        ),
        " */".into(),
    ] {
        writeln!(w, "{line}").unwrap();
    }
    writeln!(w, "#ifndef {guard}").unwrap();
    writeln!(w, "#define {guard}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "#include \"tally.h\"").unwrap();
}

/// A list's or option's C type and codecs, once per program (several headers may use it).
fn c_composite(w: &mut String, abi: &Abi, ty: &Type) {
    let t = c_type(ty);
    writeln!(w).unwrap();
    writeln!(w, "#ifndef TALLY_TYPE_{t}").unwrap();
    writeln!(w, "#define TALLY_TYPE_{t}").unwrap();
    match ty {
        Type::List(item) => {
            let it = c_type(item);
            writeln!(
                w,
                "/** A `{}`: `len` items, their borsh bytes in `items`. */",
                ty.spelling()
            )
            .unwrap();
            writeln!(w, "typedef struct {{").unwrap();
            writeln!(w, "    uint32_t len;").unwrap();
            writeln!(w, "    DataStream items;").unwrap();
            writeln!(w, "}} {t};").unwrap();
            writeln!(w).unwrap();
            writeln!(
                w,
                "/** \\brief Reads a {t}, checking every item; aborts if the data ends first. */"
            )
            .unwrap();
            writeln!(
                w,
                "static inline void {t}_unpack(DataStream *ds, {t} *v) {{"
            )
            .unwrap();
            writeln!(w, "    uint32_unpack(ds, &v->len);").unwrap();
            writeln!(
                w,
                "    /* Every item takes a byte or more: refuse a count beyond the data first. */"
            )
            .unwrap();
            writeln!(
                w,
                "    assert(v->len <= (uint32_t)(ds->end - ds->pos), \"message too short\");"
            )
            .unwrap();
            writeln!(w, "    v->items.pos = ds->pos;").unwrap();
            writeln!(w, "    for (uint32_t i = 0; i < v->len; i++) {{").unwrap();
            writeln!(w, "        {it} item;").unwrap();
            writeln!(w, "        {}", c_unpack(item, "ds", "item")).unwrap();
            writeln!(w, "    }}").unwrap();
            writeln!(w, "    v->items.end = ds->pos;").unwrap();
            writeln!(w, "}}").unwrap();
            writeln!(w).unwrap();
            writeln!(w, "/** \\brief The number of bytes {t}_pack writes. */").unwrap();
            writeln!(w, "static inline uint32_t {t}_packed_size(const {t} *v) {{").unwrap();
            writeln!(w, "    return 4 + (uint32_t)(v->items.end - v->items.pos);").unwrap();
            writeln!(w, "}}").unwrap();
            writeln!(w).unwrap();
            writeln!(
                w,
                "/** \\brief Writes `v`: build `items` by packing each item into a buffer. */"
            )
            .unwrap();
            writeln!(
                w,
                "static inline void {t}_pack(WriteStream *ws, const {t} *v) {{"
            )
            .unwrap();
            writeln!(
                w,
                "    uint32_t size = (uint32_t)(v->items.end - v->items.pos);"
            )
            .unwrap();
            writeln!(w, "    uint32_pack(ws, v->len);").unwrap();
            writeln!(
                w,
                "    __builtin_memcpy(WriteStream_take(ws, size), v->items.pos, size);"
            )
            .unwrap();
            writeln!(w, "}}").unwrap();
        }
        Type::Option(inner) => {
            writeln!(
                w,
                "/** A `{}`: `value` is set when `some` is. */",
                ty.spelling()
            )
            .unwrap();
            writeln!(w, "typedef struct {{").unwrap();
            writeln!(w, "    bool some;").unwrap();
            let it = c_type(inner);
            let sep = if it.ends_with('*') { "" } else { " " };
            writeln!(w, "    {it}{sep}value;").unwrap();
            writeln!(w, "}} {t};").unwrap();
            writeln!(w).unwrap();
            writeln!(
                w,
                "/** \\brief Reads a {t}; aborts on a tag other than 0 or 1. */"
            )
            .unwrap();
            writeln!(
                w,
                "static inline void {t}_unpack(DataStream *ds, {t} *v) {{"
            )
            .unwrap();
            writeln!(w, "    bool_unpack(ds, &v->some);").unwrap();
            writeln!(w, "    if (v->some) {}", c_unpack(inner, "ds", "v->value")).unwrap();
            writeln!(w, "}}").unwrap();
            writeln!(w).unwrap();
            writeln!(w, "/** \\brief The number of bytes {t}_pack writes. */").unwrap();
            writeln!(w, "static inline uint32_t {t}_packed_size(const {t} *v) {{").unwrap();
            writeln!(
                w,
                "    return 1 + (v->some ? {} : 0);",
                c_size(abi, inner, "v->value")
            )
            .unwrap();
            writeln!(w, "}}").unwrap();
            writeln!(w).unwrap();
            writeln!(w, "/** \\brief Writes `v`. */").unwrap();
            writeln!(
                w,
                "static inline void {t}_pack(WriteStream *ws, const {t} *v) {{"
            )
            .unwrap();
            writeln!(w, "    bool_pack(ws, v->some);").unwrap();
            writeln!(w, "    if (v->some) {}", c_pack(inner, "ws", "v->value")).unwrap();
            writeln!(w, "}}").unwrap();
        }
        _ => unreachable!("only lists and options are composites"),
    }
    writeln!(w, "#endif").unwrap();
}

/// What an item is, in a comment.
fn c_what(item: &Item) -> String {
    match item.kind {
        Kind::Struct => format!("struct `{}`", item.name),
        Kind::Action => format!("action `{}`", item.name),
        Kind::Query => format!("query `{}`", item.name),
        Kind::Event => format!("event `{}`", item.name),
    }
}

/// The prefix of an item's name constant.
fn c_constant(item: &Item) -> Option<String> {
    let prefix = match item.kind {
        Kind::Struct => return None,
        Kind::Action => "ACTION",
        Kind::Query => "QUERY",
        Kind::Event => "EVENT",
    };
    Some(format!(
        "{}{prefix}_{}",
        item.const_prefix,
        item.snake.to_ascii_uppercase()
    ))
}

/// An item's name constant, struct and `_unpack`.
fn c_item_types(w: &mut String, item: &Item) {
    let t = &item.type_name;
    let what = c_what(item);
    writeln!(w).unwrap();
    let title = item.name;
    writeln!(
        w,
        "/* ---- {title} {} */",
        "-".repeat(68 - title.len().min(60))
    )
    .unwrap();
    writeln!(w).unwrap();
    if let Some(constant) = c_constant(item) {
        writeln!(w, "/** The name of {what}. */").unwrap();
        writeln!(w, "#define {constant} 0x{:016x}ULL", item.value.0).unwrap();
        writeln!(w).unwrap();
    }
    let data = if item.kind == Kind::Struct {
        ""
    } else {
        "The data of "
    };
    writeln!(w, "/** {data}{what}. */").unwrap();
    writeln!(w, "typedef struct {{").unwrap();
    if item.fields.is_empty() {
        writeln!(
            w,
            "    char empty; /* no fields: C structs cannot be empty */"
        )
        .unwrap();
    }
    for f in item.fields {
        let ty = c_type(&f.ty);
        let sep = if ty.ends_with('*') { "" } else { " " };
        writeln!(w, "    {ty}{sep}{};", f.name).unwrap();
    }
    writeln!(w, "}} {t};").unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "/** \\brief Reads a {t} from `ds`; aborts if the data ends first. */"
    )
    .unwrap();
    writeln!(
        w,
        "static inline void {t}_unpack(DataStream *ds, {t} *v) {{"
    )
    .unwrap();
    if item.fields.is_empty() {
        writeln!(w, "    (void)ds;").unwrap();
        writeln!(w, "    v->empty = 0;").unwrap();
    }
    for f in item.fields {
        writeln!(
            w,
            "    {}",
            c_unpack(&f.ty, "ds", &format!("v->{}", f.name))
        )
        .unwrap();
    }
    writeln!(w, "}}").unwrap();
}

/// An item's `_packed_size`, `_pack`, and (actions and queries) `_read`.
fn c_item_codecs(w: &mut String, abi: &Abi, item: &Item) {
    let t = &item.type_name;
    writeln!(w).unwrap();
    writeln!(
        w,
        "/** \\brief The number of bytes {t}_pack writes for `v`. */"
    )
    .unwrap();
    writeln!(w, "static inline uint32_t {t}_packed_size(const {t} *v) {{").unwrap();
    let fixed: u32 = item
        .fields
        .iter()
        .filter_map(|f| f.ty.fixed_size(abi))
        .sum();
    let var: Vec<String> = item
        .fields
        .iter()
        .filter(|f| f.ty.fixed_size(abi).is_none())
        .map(|f| format!(" + {}", c_size(abi, &f.ty, &format!("v->{}", f.name))))
        .collect();
    if var.is_empty() {
        writeln!(w, "    (void)v;").unwrap();
    }
    writeln!(w, "    return {fixed}{};", var.concat()).unwrap();
    writeln!(w, "}}").unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "/** \\brief Writes `v` to `ws`, as borsh; aborts if it does not fit. */"
    )
    .unwrap();
    writeln!(
        w,
        "static inline void {t}_pack(WriteStream *ws, const {t} *v) {{"
    )
    .unwrap();
    if item.fields.is_empty() {
        writeln!(w, "    (void)ws;").unwrap();
        writeln!(w, "    (void)v;").unwrap();
    }
    for f in item.fields {
        writeln!(w, "    {}", c_pack(&f.ty, "ws", &format!("v->{}", f.name))).unwrap();
    }
    writeln!(w, "}}").unwrap();
    if matches!(item.kind, Kind::Action | Kind::Query) {
        let what = if item.kind == Kind::Action {
            "action"
        } else {
            "query"
        };
        writeln!(w).unwrap();
        writeln!(
            w,
            "/** \\brief Reads the running {what}'s data as exactly one {t} (see tally_message). */"
        )
        .unwrap();
        writeln!(w, "static inline void {t}_read({t} *v) {{").unwrap();
        writeln!(w, "    DataStream ds = tally_message();").unwrap();
        writeln!(w, "    {t}_unpack(&ds, v);").unwrap();
        writeln!(w, "    DataStream_end(&ds);").unwrap();
        writeln!(w, "}}").unwrap();
    }
}

/// An item's `_emit` (events), `_reply`, and `_call` or `_ask` (actions and queries).
fn c_item_calls(w: &mut String, abi: &Abi, item: &Item) {
    let t = &item.type_name;
    let Some(constant) = c_constant(item) else {
        return;
    };
    if item.kind == Kind::Event {
        writeln!(w).unwrap();
        writeln!(
            w,
            "/** \\brief Emits event `{}` with `v`: kept in the transaction's receipt. */",
            item.name
        )
        .unwrap();
        writeln!(w, "static inline void {t}_emit(const {t} *v) {{").unwrap();
        c_pack_into_buffer(w, t);
        writeln!(w, "    tally_emit({constant}, buffer, size);").unwrap();
        writeln!(w, "}}").unwrap();
        return;
    }
    let (what, import, verb) = if item.kind == Kind::Action {
        ("action", "tally_call", "call")
    } else {
        ("query", "tally_query", "ask")
    };
    if let Some(r) = item.returns {
        writeln!(w).unwrap();
        writeln!(
            w,
            "/** \\brief Sets the running {what}'s return data: what `{}` returns. */",
            item.name
        )
        .unwrap();
        writeln!(
            w,
            "static inline void {t}_reply({}) {{",
            c_param(r, "value")
        )
        .unwrap();
        // The value as an lvalue of its own type: composites come by pointer.
        let value = if c_by_pointer(r) { "(*value)" } else { "value" };
        writeln!(w, "    char buffer[{} + 1];", c_size(abi, r, value)).unwrap();
        writeln!(w, "    WriteStream ws;").unwrap();
        writeln!(w, "    WriteStream_init(&ws, buffer, sizeof buffer);").unwrap();
        writeln!(w, "    {}", c_pack(r, "&ws", value)).unwrap();
        writeln!(w, "    tally_set_return(buffer, WriteStream_size(&ws));").unwrap();
        writeln!(w, "}}").unwrap();
    }
    writeln!(w).unwrap();
    let out = item.returns.map(|r| {
        let ty = c_type(r);
        let sep = if ty.ends_with('*') { "" } else { " " };
        format!(", {ty}{sep}*out")
    });
    writeln!(
        w,
        "/** \\brief {} {what} `{}` of `contract` with `v`, giving it at most `fuel` (0: all",
        if item.kind == Kind::Action {
            "Calls"
        } else {
            "Asks"
        },
        item.name
    )
    .unwrap();
    writeln!(
        w,
        " * this action has left). Returns 0, or the callee's abort code (its writes rolled back)."
    )
    .unwrap();
    if out.is_some() {
        writeln!(
            w,
            " * On 0, `*out` is what it returned (strings and bytes valid until the next call). */"
        )
        .unwrap();
    } else {
        writeln!(w, " */").unwrap();
    }
    writeln!(
        w,
        "static inline int32_t {t}_{verb}(AccountName contract, const {t} *v, uint64_t fuel{}) {{",
        out.clone().unwrap_or_default()
    )
    .unwrap();
    c_pack_into_buffer(w, t);
    writeln!(
        w,
        "    int32_t status = {import}(contract, {constant}, buffer, size, fuel);"
    )
    .unwrap();
    if let Some(r) = item.returns {
        writeln!(w, "    if (status == 0) {{").unwrap();
        writeln!(w, "        DataStream ds = tally_returned();").unwrap();
        writeln!(w, "        {}", c_unpack(r, "&ds", "*out")).unwrap();
        writeln!(w, "        DataStream_end(&ds);").unwrap();
        writeln!(w, "    }}").unwrap();
    }
    writeln!(w, "    return status;").unwrap();
    writeln!(w, "}}").unwrap();
}

/// Packs `*v` (a `t`) into a stack buffer `buffer` of `size` bytes.
fn c_pack_into_buffer(w: &mut String, t: &str) {
    writeln!(w, "    uint32_t size = {t}_packed_size(v);").unwrap();
    // The buffer is on the stack (8 KiB in a C contract): refuse what would overflow it with a
    // clear reason, before the array is made.
    writeln!(
        w,
        "    assert(size <= TALLY_MESSAGE_MAX, \"data longer than TALLY_MESSAGE_MAX\");"
    )
    .unwrap();
    // One more byte than needed: a C array cannot be empty.
    writeln!(w, "    char buffer[size + 1];").unwrap();
    writeln!(w, "    WriteStream ws;").unwrap();
    writeln!(w, "    WriteStream_init(&ws, buffer, size);").unwrap();
    writeln!(w, "    {t}_pack(&ws, v);").unwrap();
}

/// The handler declarations and `{stem}_dispatch` (actions) or `{stem}_query_dispatch`.
fn c_dispatch(w: &mut String, items: &[Item], stem: &str, kind: Kind) {
    let entries: Vec<&Item> = items.iter().filter(|i| i.kind == kind).collect();
    if entries.is_empty() {
        return;
    }
    let upper = stem.to_ascii_uppercase();
    let (title, handler, fname, export, params) = if kind == Kind::Action {
        (
            "dispatch",
            "on",
            format!("{stem}_dispatch"),
            "TALLY_EXPORT(\"apply\") void apply(uint64_t receiver, uint64_t code, uint64_t action)",
            "uint64_t receiver, uint64_t code, uint64_t action",
        )
    } else {
        (
            "query dispatch",
            "answer",
            format!("{stem}_query_dispatch"),
            "TALLY_EXPORT(\"query\") void query(uint64_t receiver, uint64_t method)",
            "uint64_t receiver, uint64_t method",
        )
    };
    writeln!(w).unwrap();
    writeln!(w, "/* ---- {title} {} */", "-".repeat(68 - title.len())).unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "#if !defined(TALLY_NO_DISPATCH) && !defined({upper}_NO_DISPATCH)"
    )
    .unwrap();
    writeln!(
        w,
        "/* The handlers the contract defines, one per {}. They are static, so they are not",
        if kind == Kind::Action {
            "action"
        } else {
            "query"
        }
    )
    .unwrap();
    writeln!(
        w,
        " * exported; a missing one is a warning and a link error that names it. */"
    )
    .unwrap();
    for a in &entries {
        writeln!(
            w,
            "static void {handler}_{}(const ApplyContext *ctx, const {} *msg);",
            a.snake, a.type_name
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    if kind == Kind::Action {
        writeln!(
            w,
            "/** \\brief Routes an action sent to this contract (code == receiver) to its on_<action>"
        )
        .unwrap();
        writeln!(
            w,
            " * handler with its data (read by _read); aborts \"unknown action\" on any other. Call it"
        )
        .unwrap();
        writeln!(w, " * from apply:").unwrap();
    } else {
        writeln!(
            w,
            "/** \\brief Routes a query to its answer_<query> handler with its data (read by _read),"
        )
        .unwrap();
        writeln!(
            w,
            " * which answers with _reply; aborts \"unknown query\" on any other. Call it from query:"
        )
        .unwrap();
    }
    writeln!(w, " *").unwrap();
    writeln!(w, " *     {export} {{").unwrap();
    let args = if kind == Kind::Action {
        "receiver, code, action"
    } else {
        "receiver, method"
    };
    writeln!(w, " *         {fname}({args});").unwrap();
    writeln!(w, " *     }}").unwrap();
    writeln!(w, " */").unwrap();
    writeln!(w, "static inline void {fname}({params}) {{").unwrap();
    let (switch, unknown) = if kind == Kind::Action {
        writeln!(w, "    if (code != receiver) return;").unwrap();
        writeln!(w, "    ApplyContext ctx = {{receiver, code, action}};").unwrap();
        ("action", "unknown action")
    } else {
        writeln!(w, "    ApplyContext ctx = {{receiver, receiver, method}};").unwrap();
        ("method", "unknown query")
    };
    writeln!(w, "    switch ({switch}) {{").unwrap();
    for a in &entries {
        writeln!(w, "    case {}: {{", c_constant(a).expect("not a struct")).unwrap();
        writeln!(w, "        {} msg;", a.type_name).unwrap();
        writeln!(w, "        {}_read(&msg);", a.type_name).unwrap();
        writeln!(w, "        {handler}_{}(&ctx, &msg);", a.snake).unwrap();
        writeln!(w, "        return;").unwrap();
        writeln!(w, "    }}").unwrap();
    }
    writeln!(w, "    }}").unwrap();
    writeln!(w, "    assert(0, \"{unknown}\");").unwrap();
    writeln!(w, "}}").unwrap();
    writeln!(w, "#endif /* dispatch */").unwrap();
}

// ---- Rust -------------------------------------------------------------------------------

fn rust_type(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::U8 => "u8".into(),
        Type::U16 => "u16".into(),
        Type::U32 => "u32".into(),
        Type::U64 => "u64".into(),
        Type::U128 => "u128".into(),
        Type::I32 => "i32".into(),
        Type::I64 => "i64".into(),
        Type::Name => "Name".into(),
        Type::String => "String".into(),
        Type::Bytes => "Vec<u8>".into(),
        Type::List(t) => format!("Vec<{}>", rust_type(t)),
        Type::Option(t) => format!("Option<{}>", rust_type(t)),
        Type::Struct(s) => s.clone(),
    }
}

fn rust_ident(name: &str) -> anyhow::Result<String> {
    if RUST_UNRAW.contains(&name) {
        bail!("field name {name:?} cannot be a Rust identifier; rename it in the ABI");
    }
    Ok(if RUST_KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    })
}

fn rust_module(items: &[Item], source: &Source) -> anyhow::Result<String> {
    let mut r = String::new();
    rust_preamble(&mut r, source);
    for item in items {
        rust_item(&mut r, item)?;
    }
    for (kind, enum_name, trait_name, what) in [
        (Kind::Action, "Action", "Actions", "action"),
        (Kind::Query, "Query", "Queries", "query"),
        (Kind::Event, "Event", "Events", "event"),
    ] {
        let of_kind: Vec<&Item> = items.iter().filter(|i| i.kind == kind).collect();
        if !of_kind.is_empty() {
            rust_enum(&mut r, &of_kind, enum_name, trait_name, what);
        }
    }
    Ok(r)
}

/// The module's comment and imports.
fn rust_preamble(w: &mut String, source: &Source) {
    for line in [
        format!(
            "//! The actions, queries, events and structs of {}, as Rust types.",
            source.file
        ),
        "//!".into(),
        format!(
            "//! Generated by tally abigen from {} (--lang rust)",
            source.path
        ),
        "//! Do not edit: change the ABI and run tally abigen again (CI checks this file is current)."
            .into(),
        "//!".into(),
        "//! One struct per item (borsh derives); an enum per kind: `Action`, `Query`, `Event`. A"
            .into(),
        "//! contract passes its handler of `Action` to `tally_host_api::contract!` and of `Query`"
            .into(),
        "//! to `tally_host_api::queries!`, answers with `guest::reply` and emits with".into(),
        "//! `guest::emit_event`; another contract calls it with `guest::call_action` and".into(),
        "//! `guest::ask`; a client or a test encodes with `Message::encode` and decodes events".into(),
        "//! with `Event::decode`.".into(),
        String::new(),
        "use tally_host_api::message::*;".into(),
    ] {
        writeln!(w, "{line}").unwrap();
    }
}

/// An item's struct and its `Field`, `Message`/`EventData` and `From` impls.
fn rust_item(w: &mut String, item: &Item) -> anyhow::Result<()> {
    let t = &item.type_name;
    writeln!(w).unwrap();
    let doc = match item.kind {
        Kind::Struct => format!("/// Struct `{}`.", item.name),
        Kind::Action => format!("/// The data of action `{}`.", item.name),
        Kind::Query => format!("/// The data of query `{}`.", item.name),
        Kind::Event => format!("/// Event `{}`.", item.name),
    };
    writeln!(w, "{doc}").unwrap();
    writeln!(
        w,
        "#[derive(Debug, Clone, PartialEq, Eq, borsh::BorshSerialize, borsh::BorshDeserialize)]"
    )
    .unwrap();
    writeln!(w, "#[borsh(crate = \"tally_host_api::message::borsh\")]").unwrap();
    if item.fields.is_empty() {
        writeln!(w, "pub struct {t} {{}}").unwrap();
    } else {
        writeln!(w, "pub struct {t} {{").unwrap();
        for f in item.fields {
            writeln!(w, "    pub {}: {},", rust_ident(&f.name)?, rust_type(&f.ty)).unwrap();
        }
        writeln!(w, "}}").unwrap();
    }
    writeln!(w).unwrap();
    writeln!(w, "impl Field for {t} {{").unwrap();
    let r_param = if item.fields.is_empty() { "_r" } else { "r" };
    writeln!(
        w,
        "    fn read({r_param}: &mut Reader<'_>) -> Result<Self, DecodeError> {{"
    )
    .unwrap();
    let reads = item
        .fields
        .iter()
        .map(|f| Ok(format!("{}: r.read()?", rust_ident(&f.name)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let inline = reads.join(", ");
    if reads.is_empty() {
        writeln!(w, "        Ok(Self {{}})").unwrap();
    } else if inline.len() <= RUSTFMT_STRUCT_LIT_WIDTH {
        // rustfmt keeps a struct literal this short on one line, so the file stays
        // rustfmt-clean.
        writeln!(w, "        Ok(Self {{ {inline} }})").unwrap();
    } else {
        writeln!(w, "        Ok(Self {{").unwrap();
        for read in &reads {
            writeln!(w, "            {read},").unwrap();
        }
        writeln!(w, "        }})").unwrap();
    }
    writeln!(w, "    }}").unwrap();
    writeln!(w, "}}").unwrap();
    let (enum_name, marker) = match item.kind {
        Kind::Struct => return Ok(()),
        Kind::Action => ("Action", Some("ActionData")),
        Kind::Query => ("Query", Some("QueryData")),
        Kind::Event => ("Event", None),
    };
    writeln!(w).unwrap();
    match marker {
        Some(marker) => {
            let returns = item.returns.map_or_else(|| "()".to_string(), rust_type);
            writeln!(w, "impl Message for {t} {{").unwrap();
            writeln!(w, "    const NAME: Name = name({:?});", item.name).unwrap();
            writeln!(w, "    type Returns = {returns};").unwrap();
            writeln!(w, "}}").unwrap();
            writeln!(w).unwrap();
            writeln!(w, "impl {marker} for {t} {{}}").unwrap();
        }
        None => {
            writeln!(w, "impl EventData for {t} {{").unwrap();
            writeln!(w, "    const NAME: Name = name({:?});", item.name).unwrap();
            writeln!(w, "}}").unwrap();
        }
    }
    writeln!(w).unwrap();
    writeln!(w, "impl From<{t}> for {enum_name} {{").unwrap();
    writeln!(w, "    fn from(data: {t}) -> Self {{").unwrap();
    writeln!(w, "        {enum_name}::{}(data)", item.variant).unwrap();
    writeln!(w, "    }}").unwrap();
    writeln!(w, "}}").unwrap();
    Ok(())
}

/// `Action`, `Query` or `Event`: every item of one kind with its data, and its trait impl.
fn rust_enum(w: &mut String, items: &[&Item], enum_name: &str, trait_name: &str, what: &str) {
    writeln!(w).unwrap();
    writeln!(w, "/// Every {what} of the contract, with its data.").unwrap();
    writeln!(w, "#[derive(Debug, Clone, PartialEq, Eq)]").unwrap();
    writeln!(w, "pub enum {enum_name} {{").unwrap();
    for a in items {
        writeln!(w, "    /// `{}`", a.name).unwrap();
        writeln!(w, "    {}({}),", a.variant, a.type_name).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "impl {trait_name} for {enum_name} {{").unwrap();
    writeln!(
        w,
        "    fn decode(name: Name, data: &[u8]) -> Result<Self, DecodeError> {{"
    )
    .unwrap();
    writeln!(w, "        match name {{").unwrap();
    for a in items {
        writeln!(
            w,
            "            {}::NAME => read_exact(data).map({enum_name}::{}),",
            a.type_name, a.variant
        )
        .unwrap();
    }
    writeln!(
        w,
        "            other => Err(DecodeError::UnknownAction(other)),"
    )
    .unwrap();
    writeln!(w, "        }}").unwrap();
    writeln!(w, "    }}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "    fn name(&self) -> Name {{").unwrap();
    writeln!(w, "        match self {{").unwrap();
    for a in items {
        writeln!(
            w,
            "            {enum_name}::{}(_) => {}::NAME,",
            a.variant, a.type_name
        )
        .unwrap();
    }
    writeln!(w, "        }}").unwrap();
    writeln!(w, "    }}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "    fn encode(&self) -> Vec<u8> {{").unwrap();
    writeln!(w, "        match self {{").unwrap();
    for a in items {
        writeln!(
            w,
            "            {enum_name}::{}(data) => encode(data),",
            a.variant
        )
        .unwrap();
    }
    writeln!(w, "        }}").unwrap();
    writeln!(w, "    }}").unwrap();
    writeln!(w, "}}").unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_walk_up_and_down() {
        assert_eq!(
            relative(Path::new("/a/b/x.json"), Path::new("/a/b/c/d")),
            PathBuf::from("../../x.json")
        );
        assert_eq!(
            relative(Path::new("/a/x.json"), Path::new("/a")),
            PathBuf::from("x.json")
        );
    }

    fn source() -> Source {
        Source {
            file: "x.abi.json".into(),
            path: "x.abi.json".into(),
        }
    }

    #[test]
    fn tables_are_accepted_and_change_no_generated_code() {
        let plain = r#"{"structs": {"Pair": [{"name": "a", "type": "u64"}]},
                "actions": {"init": [{"name": "p", "type": "Pair"}]}"#;
        let with_tables = format!(
            "{plain}, \"tables\": {{\"pairs\": {{\"key\": \"name\", \"value\": \"Pair\"}},
                \"stats\": {{\"key\": {{\"prefix\": \"s\"}}, \"value\": [{{\"name\": \"n\", \"type\": \"u8\"}}]}}}}}}"
        );
        let plain = Abi::parse(&format!("{plain}}}")).unwrap();
        let tabled = Abi::parse(&with_tables).unwrap();
        assert_eq!(tabled.tables.len(), 2);
        for lang in [Lang::C, Lang::Rust] {
            assert_eq!(
                generate(&plain, lang, "x", &source(), "").unwrap(),
                generate(&tabled, lang, "x", &source(), "").unwrap()
            );
        }
        // A prefixed C header renames a table's struct like every other use of it.
        let prefixed = tabled.with_struct_prefix("x_");
        assert!(matches!(
            &prefixed.tables["pairs"].value,
            crate::commands::abi::TableValue::Type(Type::Struct(s)) if s == "x_Pair"
        ));
    }

    #[test]
    fn a_prefix_renames_every_c_type_function_and_constant() {
        let abi = Abi::parse(
            r#"{"structs": {"Pair": [{"name": "a", "type": "u64"}]},
                "actions": {"init": {"args": [{"name": "p", "type": "Pair[]"}], "returns": "Pair"}},
                "queries": {"get": {"returns": "Pair?"}},
                "events": {"done": [{"name": "p", "type": "Pair"}]}}"#,
        )
        .unwrap();
        let h = generate(&abi, Lang::C, "x", &source(), "x_").unwrap();
        for wanted in [
            "} x_Pair;",
            "} x_Init;",
            "x_Init_call(AccountName contract, const x_Init *v, uint64_t fuel, x_Pair *out)",
            "x_GetQuery_ask(",
            "Option_x_Pair *out",
            "x_DoneEvent_emit(",
            "#define X_ACTION_INIT ",
            "#define X_QUERY_GET ",
            "#define X_EVENT_DONE ",
            "List_x_Pair_unpack(ds, &v->p);",
            "(--lang c --prefix x_)",
        ] {
            assert!(h.contains(wanted), "no {wanted:?} in\n{h}");
        }
        for unwanted in ["} Pair;", "} Init;", "#define ACTION_INIT"] {
            assert!(!h.contains(unwanted), "{unwanted:?} in\n{h}");
        }
        let e = generate(&abi, Lang::C, "x", &source(), "9x").unwrap_err();
        assert!(e.to_string().contains("must start a C identifier"), "{e}");
    }

    #[test]
    fn generated_names_may_not_clash() {
        let abi = Abi::parse(
            r#"{"actions": {"balance.q": []}, "queries": {"balance": []},
                "events": {"x": []}}"#,
        )
        .unwrap();
        // `balance.q` → BalanceQ; query `balance` → BalanceQuery: distinct, so this passes.
        generate(&abi, Lang::Rust, "x", &source(), "").unwrap();
        let abi = Abi::parse(
            r#"{"structs": {"SetQuery": [{"name": "a", "type": "u8"}]}, "queries": {"set": []}}"#,
        )
        .unwrap();
        let e = generate(&abi, Lang::Rust, "x", &source(), "").unwrap_err();
        assert!(
            e.to_string().contains("would both generate type SetQuery"),
            "{e}"
        );
        let abi = Abi::parse(
            r#"{"structs": {"Reader": [{"name": "a", "type": "u8"}]}, "actions": {"a": []}}"#,
        )
        .unwrap();
        let e = generate(&abi, Lang::C, "x", &source(), "").unwrap_err();
        assert!(e.to_string().contains("would clash with a type"), "{e}");
    }

    #[test]
    fn stems_are_c_identifiers() {
        assert_eq!(
            abi_stem(Path::new("contracts/token-rs.abi.json")),
            "token_rs"
        );
        assert_eq!(abi_stem(Path::new("9lives.abi.json")), "_9lives");
    }
}
