//! `tally abigen`: generate a contract's action types, readers and writers from its ABI file,
//! for C (a header over `tally.h`) or Rust (a module over `tally_host_api::message`).
//!
//! Both sides read an action's data the same way: field by field in ABI order, strictly (no
//! bytes left over, strings in UTF-8), aborting with the same messages.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use tally_host_api::Name;

use super::abi::{Abi, Field};

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

C: one struct per action with _unpack, _pack, _packed_size and _read (the action's whole
message, strictly), and <abi>_dispatch, which routes apply to your static on_<action>
handlers (define TALLY_NO_DISPATCH before the include to leave it out).
Rust: one struct per action (borsh derives) and an `Action` enum; pass your handler to
tally_host_api::contract! and it receives the decoded Action.
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
}

pub fn run(args: AbigenArgs) -> anyhow::Result<()> {
    let abi = Abi::read(&args.abi)?;
    let source = Source {
        file: file_name(&args.abi),
        path: source_path(&args.abi, args.output.as_deref())?,
    };
    let stem = abi_stem(&args.abi);
    let text = generate(&abi, args.lang, &stem, &source)?;
    let Some(out) = &args.output else {
        print!("{text}");
        return Ok(());
    };
    let rerun = format!(
        "tally abigen {} --lang {} -o {}",
        args.abi.display(),
        args.lang.label(),
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
    let n = abi.actions.len();
    println!(
        "wrote {} ({n} action{}, {}) from {}",
        out.display(),
        if n == 1 { "" } else { "s" },
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

/// One action, with the identifiers both languages use for it.
struct Action<'a> {
    /// Its name in the ABI.
    name: &'a str,
    value: Name,
    /// `transfer` → `Transfer`, `set.owner` → `SetOwner`: the struct (and enum variant).
    type_name: String,
    /// `transfer` → `transfer`, `set.owner` → `set_owner`: for C's `on_` and `ACTION_`.
    snake: String,
    fields: &'a [Field],
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

/// Names that cannot be raw identifiers in Rust.
const RUST_UNRAW: &[&str] = &["self", "Self", "super", "crate", "_"];

fn actions(abi: &Abi) -> anyhow::Result<Vec<Action<'_>>> {
    if abi.actions.is_empty() {
        bail!("the ABI has no actions: add one under \"actions\"");
    }
    let mut by_type: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for (name, fields) in &abi.actions {
        let value: Name = name
            .parse()
            .map_err(|e| anyhow::anyhow!("action {name:?}: {e}"))?;
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            bail!("action {name:?}: a generated type cannot start with a digit; rename the action");
        }
        let type_name: String = name
            .split('.')
            .map(|part| {
                let mut chars = part.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect();
        if RESERVED_TYPES.contains(&type_name.as_str()) {
            bail!(
                "action {name:?}: its generated type {type_name} would clash with a type of \
                 tally.h or the generated Rust module; rename the action"
            );
        }
        if let Some(other) = by_type.insert(type_name.clone(), name) {
            bail!("actions {other:?} and {name:?} would both generate type {type_name}");
        }
        let mut seen = std::collections::BTreeSet::new();
        for f in fields {
            let ok = f
                .name
                .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && f.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                bail!(
                    "field {name}.{:?} is not an identifier (letters, digits and _, not first a digit)",
                    f.name
                );
            }
            if !seen.insert(f.name.as_str()) {
                bail!("action {name:?} has two fields named {:?}", f.name);
            }
        }
        out.push(Action {
            name,
            value,
            type_name,
            snake: name.replace('.', "_"),
            fields,
        });
    }
    Ok(out)
}

/// The generated file for `abi` in `lang`.
pub fn generate(abi: &Abi, lang: Lang, stem: &str, source: &Source) -> anyhow::Result<String> {
    let actions = actions(abi)?;
    match lang {
        Lang::C => c_header(&actions, stem, source),
        Lang::Rust => rust_module(&actions, source),
    }
}

fn c_type(ty: &str) -> &'static str {
    match ty {
        "name" => "AccountName",
        "u8" => "uint8_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "i64" => "int64_t",
        "string" => "String *",
        "bytes" => "Bytes *",
        other => unreachable!("Abi::read admits no type {other}"),
    }
}

/// The tally.h codec for an ABI type: `<prefix>_unpack` and `<prefix>_pack`.
fn c_codec(ty: &str) -> &'static str {
    match ty {
        "name" => "AccountName",
        "u8" => "uint8",
        "u32" => "uint32",
        "u64" => "uint64",
        "i64" => "int64",
        "string" => "String",
        "bytes" => "Bytes",
        other => unreachable!("Abi::read admits no type {other}"),
    }
}

fn c_fixed_size(ty: &str) -> Option<u32> {
    match ty {
        "name" | "u64" | "i64" => Some(8),
        "u32" => Some(4),
        "u8" => Some(1),
        _ => None,
    }
}

fn c_header(actions: &[Action], stem: &str, source: &Source) -> anyhow::Result<String> {
    for a in actions {
        for f in a.fields {
            if C_KEYWORDS.contains(&f.name.as_str()) {
                bail!(
                    "field {}.{} is a C keyword; rename it in the ABI",
                    a.name,
                    f.name
                );
            }
        }
    }
    let guard = format!("{}_ABI_H", stem.to_ascii_uppercase());
    let mut h = String::new();
    c_preamble(&mut h, stem, source, &guard);
    for a in actions {
        c_action_types(&mut h, a);
        c_action_codecs(&mut h, a);
    }
    c_dispatch(&mut h, actions, stem);
    let w = &mut h;
    writeln!(w).unwrap();
    writeln!(w, "#endif /* {guard} */").unwrap();
    Ok(h)
}

/// The header's comment, include guard and include.
fn c_preamble(w: &mut String, stem: &str, source: &Source, guard: &str) {
    writeln!(w, "/* The actions of {}, for a C contract.", source.file).unwrap();
    writeln!(w, " *").unwrap();
    writeln!(
        w,
        " * Generated by tally abigen from {} (--lang c)",
        source.path
    )
    .unwrap();
    writeln!(
        w,
        " * Do not edit: change the ABI and run tally abigen again (CI checks this file is current)."
    )
    .unwrap();
    writeln!(w, " *").unwrap();
    writeln!(
        w,
        " * Per action: a struct in borsh field order; _unpack reads it from a DataStream, _pack"
    )
    .unwrap();
    writeln!(
        w,
        " * writes it to a WriteStream, _read reads the running action's whole message strictly"
    )
    .unwrap();
    writeln!(
        w,
        " * (as a Rust contract does: no bytes left over, strings in UTF-8). String and Bytes fields"
    )
    .unwrap();
    writeln!(
        w,
        " * point into the message buffer, valid until the action ends. {stem}_dispatch routes"
    )
    .unwrap();
    writeln!(
        w,
        " * apply to the static on_<action> handlers the contract defines. */"
    )
    .unwrap();
    writeln!(w, "#ifndef {guard}").unwrap();
    writeln!(w, "#define {guard}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "#include \"tally.h\"").unwrap();
}

/// An action's name constant, struct and `_unpack`.
fn c_action_types(w: &mut String, a: &Action) {
    let t = &a.type_name;
    writeln!(w).unwrap();
    writeln!(w, "/* ---- {} {} */", a.name, "-".repeat(68 - a.name.len())).unwrap();
    writeln!(w).unwrap();
    writeln!(w, "/** The name of action `{}`. */", a.name).unwrap();
    writeln!(
        w,
        "#define ACTION_{} 0x{:016x}ULL",
        a.snake.to_ascii_uppercase(),
        a.value.0
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(w, "/** The data of action `{}`. */", a.name).unwrap();
    writeln!(w, "typedef struct {{").unwrap();
    if a.fields.is_empty() {
        writeln!(
            w,
            "    char empty; /* no fields: C structs cannot be empty */"
        )
        .unwrap();
    }
    for f in a.fields {
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
    if a.fields.is_empty() {
        writeln!(w, "    (void)ds;").unwrap();
        writeln!(w, "    v->empty = 0;").unwrap();
    }
    for f in a.fields {
        // Strings are checked as UTF-8 where they are read, as Rust's String is.
        let unpack = match f.ty.as_str() {
            "string" => "String_unpack_utf8".to_string(),
            other => format!("{}_unpack", c_codec(other)),
        };
        writeln!(w, "    {unpack}(ds, &v->{});", f.name).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w).unwrap();
}

/// An action's `_packed_size`, `_pack` and `_read`.
fn c_action_codecs(w: &mut String, a: &Action) {
    let t = &a.type_name;
    writeln!(
        w,
        "/** \\brief The number of bytes {t}_pack writes for `v`. */"
    )
    .unwrap();
    writeln!(w, "static inline uint32_t {t}_packed_size(const {t} *v) {{").unwrap();
    let fixed: u32 = a.fields.iter().filter_map(|f| c_fixed_size(&f.ty)).sum();
    let var: Vec<String> = a
        .fields
        .iter()
        .filter(|f| c_fixed_size(&f.ty).is_none())
        .map(|f| format!(" + 4 + v->{}->len", f.name))
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
    if a.fields.is_empty() {
        writeln!(w, "    (void)ws;").unwrap();
        writeln!(w, "    (void)v;").unwrap();
    }
    for f in a.fields {
        writeln!(w, "    {}_pack(ws, v->{});", c_codec(&f.ty), f.name).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "/** \\brief Reads the running action's data as exactly one {t} (see tally_message). */"
    )
    .unwrap();
    writeln!(w, "static inline void {t}_read({t} *v) {{").unwrap();
    writeln!(w, "    DataStream ds = tally_message();").unwrap();
    writeln!(w, "    {t}_unpack(&ds, v);").unwrap();
    writeln!(w, "    DataStream_end(&ds);").unwrap();
    writeln!(w, "}}").unwrap();
}

/// The handler declarations and `{stem}_dispatch`.
fn c_dispatch(w: &mut String, actions: &[Action], stem: &str) {
    writeln!(w).unwrap();
    writeln!(w, "/* ---- dispatch {} */", "-".repeat(68 - 8)).unwrap();
    writeln!(w).unwrap();
    writeln!(w, "#ifndef TALLY_NO_DISPATCH").unwrap();
    writeln!(
        w,
        "/* The handlers the contract defines, one per action. They are static, so they are not"
    )
    .unwrap();
    writeln!(
        w,
        " * exported; a missing one is a warning and a link error that names it. */"
    )
    .unwrap();
    for a in actions {
        writeln!(
            w,
            "static void on_{}(const ApplyContext *ctx, const {} *msg);",
            a.snake, a.type_name
        )
        .unwrap();
    }
    writeln!(w).unwrap();
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
    writeln!(w, " *").unwrap();
    writeln!(
        w,
        " *     TALLY_EXPORT(\"apply\") void apply(uint64_t receiver, uint64_t code, uint64_t action) {{"
    )
    .unwrap();
    writeln!(w, " *         {stem}_dispatch(receiver, code, action);").unwrap();
    writeln!(w, " *     }}").unwrap();
    writeln!(w, " */").unwrap();
    writeln!(
        w,
        "static inline void {stem}_dispatch(uint64_t receiver, uint64_t code, uint64_t action) {{"
    )
    .unwrap();
    writeln!(w, "    if (code != receiver) return;").unwrap();
    writeln!(w, "    ApplyContext ctx = {{receiver, code, action}};").unwrap();
    writeln!(w, "    switch (action) {{").unwrap();
    for a in actions {
        writeln!(w, "    case ACTION_{}: {{", a.snake.to_ascii_uppercase()).unwrap();
        writeln!(w, "        {} msg;", a.type_name).unwrap();
        writeln!(w, "        {}_read(&msg);", a.type_name).unwrap();
        writeln!(w, "        on_{}(&ctx, &msg);", a.snake).unwrap();
        writeln!(w, "        return;").unwrap();
        writeln!(w, "    }}").unwrap();
    }
    writeln!(w, "    }}").unwrap();
    writeln!(w, "    assert(0, \"unknown action\");").unwrap();
    writeln!(w, "}}").unwrap();
    writeln!(w, "#endif /* TALLY_NO_DISPATCH */").unwrap();
}

fn rust_type(ty: &str) -> &'static str {
    match ty {
        "name" => "Name",
        "u8" => "u8",
        "u32" => "u32",
        "u64" => "u64",
        "i64" => "i64",
        "string" => "String",
        "bytes" => "Vec<u8>",
        other => unreachable!("Abi::read admits no type {other}"),
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

fn rust_module(actions: &[Action], source: &Source) -> anyhow::Result<String> {
    let uses_string = actions
        .iter()
        .any(|a| a.fields.iter().any(|f| f.ty == "string"));
    let mut r = String::new();
    rust_preamble(&mut r, source, uses_string);
    for a in actions {
        rust_action(&mut r, a)?;
    }
    rust_action_enum(&mut r, actions);
    Ok(r)
}

/// The module's comment and imports.
fn rust_preamble(w: &mut String, source: &Source, uses_string: bool) {
    writeln!(w, "//! The actions of {}, as Rust types.", source.file).unwrap();
    writeln!(w, "//!").unwrap();
    writeln!(
        w,
        "//! Generated by tally abigen from {} (--lang rust)",
        source.path
    )
    .unwrap();
    writeln!(
        w,
        "//! Do not edit: change the ABI and run tally abigen again (CI checks this file is current)."
    )
    .unwrap();
    writeln!(w, "//!").unwrap();
    writeln!(
        w,
        "//! One struct per action (borsh derives) and [`Action`], all of them: a contract passes its"
    )
    .unwrap();
    writeln!(
        w,
        "//! handler of `Action` to `tally_host_api::contract!`; a client or a test encodes with"
    )
    .unwrap();
    writeln!(
        w,
        "//! `ActionData::encode` and sends the action named `ActionData::NAME`."
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(w, "use tally_host_api::Name;").unwrap();
    // Laid out as rustfmt lays it out, so the file passes `cargo fmt --check` wherever it lives.
    let imports = format!(
        "ActionData, Actions, DecodeError, Reader, {}Vec, borsh, name",
        if uses_string { "String, " } else { "" }
    );
    let one_line = format!("use tally_host_api::message::{{{imports}}};");
    if one_line.len() <= 100 {
        writeln!(w, "{one_line}").unwrap();
    } else {
        writeln!(w, "use tally_host_api::message::{{\n    {imports},\n}};").unwrap();
    }
}

/// An action's struct and its `ActionData` and `From` impls.
fn rust_action(w: &mut String, a: &Action) -> anyhow::Result<()> {
    let t = &a.type_name;
    writeln!(w).unwrap();
    writeln!(w, "/// The data of action `{}`.", a.name).unwrap();
    writeln!(
        w,
        "#[derive(Debug, Clone, PartialEq, Eq, borsh::BorshSerialize, borsh::BorshDeserialize)]"
    )
    .unwrap();
    writeln!(w, "#[borsh(crate = \"tally_host_api::message::borsh\")]").unwrap();
    if a.fields.is_empty() {
        writeln!(w, "pub struct {t} {{}}").unwrap();
    } else {
        writeln!(w, "pub struct {t} {{").unwrap();
        for f in a.fields {
            writeln!(w, "    pub {}: {},", rust_ident(&f.name)?, rust_type(&f.ty)).unwrap();
        }
        writeln!(w, "}}").unwrap();
    }
    writeln!(w).unwrap();
    writeln!(w, "impl ActionData for {t} {{").unwrap();
    writeln!(w, "    const NAME: Name = name({:?});", a.name).unwrap();
    writeln!(w).unwrap();
    let r_param = if a.fields.is_empty() { "_r" } else { "r" };
    writeln!(
        w,
        "    fn read({r_param}: &mut Reader<'_>) -> Result<Self, DecodeError> {{"
    )
    .unwrap();
    let reads = a
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
    writeln!(w).unwrap();
    writeln!(w, "impl From<{t}> for Action {{").unwrap();
    writeln!(w, "    fn from(data: {t}) -> Self {{").unwrap();
    writeln!(w, "        Action::{t}(data)").unwrap();
    writeln!(w, "    }}").unwrap();
    writeln!(w, "}}").unwrap();
    Ok(())
}

/// `Action`, every action with its data, and its `Actions` impl.
fn rust_action_enum(w: &mut String, actions: &[Action]) {
    writeln!(w).unwrap();
    writeln!(w, "/// Every action of the contract, with its data.").unwrap();
    writeln!(w, "#[derive(Debug, Clone, PartialEq, Eq)]").unwrap();
    writeln!(w, "pub enum Action {{").unwrap();
    for a in actions {
        writeln!(w, "    /// `{}`", a.name).unwrap();
        writeln!(w, "    {}({}),", a.type_name, a.type_name).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "impl Actions for Action {{").unwrap();
    writeln!(
        w,
        "    fn decode(action: Name, data: &[u8]) -> Result<Self, DecodeError> {{"
    )
    .unwrap();
    writeln!(w, "        match action {{").unwrap();
    for a in actions {
        writeln!(
            w,
            "            {t}::NAME => {t}::decode(data).map(Action::{t}),",
            t = a.type_name
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
    for a in actions {
        writeln!(
            w,
            "            Action::{t}(_) => {t}::NAME,",
            t = a.type_name
        )
        .unwrap();
    }
    writeln!(w, "        }}").unwrap();
    writeln!(w, "    }}").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "    fn encode(&self) -> Vec<u8> {{").unwrap();
    writeln!(w, "        match self {{").unwrap();
    for a in actions {
        writeln!(
            w,
            "            Action::{}(data) => data.encode(),",
            a.type_name
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

    #[test]
    fn stems_are_c_identifiers() {
        assert_eq!(
            abi_stem(Path::new("contracts/token-rs.abi.json")),
            "token_rs"
        );
        assert_eq!(abi_stem(Path::new("9lives.abi.json")), "_9lives");
    }
}
