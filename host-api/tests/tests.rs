//! The ABI table is the single source of truth: tally.h and the wasmtime registration must
//! agree with it, checked here rather than by eye.

use tally_host_api::abi::{self, ValType};

/// One `TALLY_IMPORT("name") ret fn(params);` line of tally.h, as ABI types.
#[derive(Debug, PartialEq)]
struct HeaderImport {
    name: String,
    params: Vec<ValType>,
    results: Vec<ValType>,
}

fn c_type(ty: &str) -> Option<ValType> {
    let ty = ty.trim();
    if ty.contains('*') {
        return Some(ValType::I32); // wasm32 pointers
    }
    let base = ty.split_whitespace().next().unwrap_or("");
    match base {
        "void" | "" => None,
        "int32_t" | "uint32_t" | "int" => Some(ValType::I32),
        "int64_t" | "uint64_t" | "AccountName" => Some(ValType::I64),
        other => panic!("tally.h uses a C type this test cannot map: {other}"),
    }
}

fn header_imports() -> Vec<HeaderImport> {
    let header = include_str!("../../sdk-c/include/tally.h");
    header
        .lines()
        .filter_map(|line| line.strip_prefix("TALLY_IMPORT(\""))
        .map(|rest| {
            let (name, decl) = rest.split_once("\")").expect("closing quote");
            let (head, params) = decl.split_once('(').expect("parameter list");
            let params = params.split_once(')').expect("closing paren").0;
            let ret = head.trim().rsplit_once(' ').expect("return type").0;
            HeaderImport {
                name: name.to_string(),
                params: params
                    .split(',')
                    .filter_map(|p| {
                        // Drop the parameter name: the type is everything before it.
                        let p = p.trim();
                        match p.rfind(['*', ' ']) {
                            Some(at) if p != "void" => c_type(&p[..=at]),
                            _ => c_type(p),
                        }
                    })
                    .collect(),
                results: c_type(ret).into_iter().collect(),
            }
        })
        .collect()
}

#[test]
fn tally_h_declares_exactly_the_abi_imports_in_order() {
    let from_header = header_imports();
    let from_table: Vec<HeaderImport> = abi::IMPORTS
        .iter()
        .map(|i| HeaderImport {
            name: i.name.to_string(),
            params: i.params.to_vec(),
            results: i.results.to_vec(),
        })
        .collect();
    assert_eq!(from_header, from_table);
}

#[test]
fn import_lookup_finds_every_entry_and_nothing_else() {
    for import in abi::IMPORTS {
        assert_eq!(abi::import(import.name), Some(import));
    }
    assert_eq!(abi::import("read_db"), None);
}

#[cfg(feature = "host")]
mod linker {
    use super::*;
    use tally_host_api::imports::{ActionData, CallState};
    use tally_host_api::linker::{WasmHost, add_to_linker};
    use tally_host_api::{Host, HostError, Name};
    use wasmtime::{Engine, Linker, Memory, Module, Store};

    #[derive(Default)]
    struct Nop(CallState);
    impl Host for Nop {
        fn message(&self) -> &[u8] {
            &[]
        }
        fn load(&mut self, _: &[u8]) -> Result<Option<&[u8]>, HostError> {
            Ok(None)
        }
        fn store(&mut self, _: &[u8], _: &[u8]) -> Result<(), HostError> {
            Ok(())
        }
        fn remove(&mut self, _: &[u8]) -> Result<(), HostError> {
            Ok(())
        }
        fn is_authorized(&self, _: Name) -> bool {
            false
        }
    }
    impl ActionData for Nop {
        fn host(&mut self) -> Result<&mut dyn Host, HostError> {
            Ok(self)
        }
        fn state(&mut self) -> &mut CallState {
            &mut self.0
        }
    }
    impl WasmHost for Nop {
        fn memory(&self) -> Option<Memory> {
            None
        }
    }

    fn wat_type(t: &ValType) -> &'static str {
        match t {
            ValType::I32 => "i32",
            ValType::I64 => "i64",
        }
    }

    #[test]
    fn linker_defines_every_import_with_its_abi_signature() {
        // A module importing every ABI function with the table's signature instantiates only
        // if the linker defines each one with exactly that signature.
        let mut wat = String::from("(module\n");
        for import in abi::IMPORTS {
            let params: Vec<_> = import.params.iter().map(wat_type).collect();
            let results: Vec<_> = import.results.iter().map(wat_type).collect();
            wat.push_str(&format!(
                "  (import \"env\" \"{}\" (func (param {}) (result {})))\n",
                import.name,
                params.join(" "),
                results.join(" ")
            ));
        }
        wat.push(')');
        let engine = Engine::default();
        let module = Module::new(&engine, wat::parse_str(&wat).unwrap()).unwrap();
        let mut linker = Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        let mut store = Store::new(&engine, Nop::default());
        linker.instantiate(&mut store, &module).unwrap();
        assert_eq!(module.imports().len(), abi::IMPORTS.len());
    }
}
