//! A contract's ABI file, as the CLI reads it: what `tally push` and `tally query` encode
//! arguments with, and what `tally abigen` generates code from.

use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::local::parse_name;

/// One field of an action.
#[derive(Debug, Deserialize)]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

/// A contract's ABI file: each action's fields, in borsh order.
#[derive(Debug, Deserialize)]
pub struct Abi {
    pub actions: std::collections::BTreeMap<String, Vec<Field>>,
}

/// Field types an ABI may use.
const TYPES: &str = "name, u8, u32, u64, i64, string, bytes (hex)";

impl Abi {
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read ABI {}", path.display()))?;
        let abi: Abi = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a valid ABI file", path.display()))?;
        for (action, fields) in &abi.actions {
            parse_name(action).with_context(|| format!("{}: action names", path.display()))?;
            for f in fields {
                if !["name", "u8", "u32", "u64", "i64", "string", "bytes"].contains(&f.ty.as_str())
                {
                    bail!(
                        "{}: field {}.{} has unknown type {:?} (known: {TYPES})",
                        path.display(),
                        action,
                        f.name,
                        f.ty
                    );
                }
            }
        }
        Ok(abi)
    }

    /// Encodes `args` for `action` (borsh).
    pub fn encode(&self, action: &str, args: &[String]) -> anyhow::Result<Vec<u8>> {
        let fields = self.actions.get(action).with_context(|| {
            let known: Vec<_> = self.actions.keys().map(String::as_str).collect();
            format!(
                "the ABI has no action {action:?} (it has: {})",
                known.join(", ")
            )
        })?;
        if fields.len() != args.len() {
            let names: Vec<_> = fields
                .iter()
                .map(|f| format!("{}:{}", f.name, f.ty))
                .collect();
            bail!(
                "{action} takes {} arguments ({}), got {}",
                fields.len(),
                names.join(" "),
                args.len()
            );
        }
        let mut out = Vec::new();
        for (f, arg) in fields.iter().zip(args) {
            let bad =
                |e: &dyn std::fmt::Display| anyhow::anyhow!("{} ({}): {arg:?}: {e}", f.name, f.ty);
            match f.ty.as_str() {
                "name" => out.extend_from_slice(&parse_name(arg)?.0.to_le_bytes()),
                "u8" => out.push(arg.parse::<u8>().map_err(|e| bad(&e))?),
                "u32" => {
                    out.extend_from_slice(&arg.parse::<u32>().map_err(|e| bad(&e))?.to_le_bytes())
                }
                "u64" => {
                    out.extend_from_slice(&arg.parse::<u64>().map_err(|e| bad(&e))?.to_le_bytes())
                }
                "i64" => {
                    out.extend_from_slice(&arg.parse::<i64>().map_err(|e| bad(&e))?.to_le_bytes())
                }
                "string" => {
                    out.extend_from_slice(&(arg.len() as u32).to_le_bytes());
                    out.extend_from_slice(arg.as_bytes());
                }
                _ => {
                    let bytes = hex::decode(arg).map_err(|e| bad(&e))?;
                    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    out.extend_from_slice(&bytes);
                }
            }
        }
        Ok(out)
    }
}
