//! Services shared by the commands and the node: opening a state store, writing files
//! atomically. Nothing here parses arguments or prints.

pub mod fs;
pub mod store;
