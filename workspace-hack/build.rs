// A build script, so that cargo applies this crate's build-dependencies too: the feature
// sets build scripts and proc macros of the workspace see.
fn main() {}
