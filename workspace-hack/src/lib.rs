//! Holds no code: see Cargo.toml. Its dependencies unify the workspace's feature sets.
