//! Where a Rust contract project finds Tally's crates (`tally-host-api`, and `tally-chain` for
//! its test harness): through a link inside the project, `.tally/sdk`, to a Tally checkout.
//!
//! The crates are not on crates.io, and a project's manifests must not hold a path of the
//! machine that created it (it would not build once committed and cloned elsewhere). So the
//! manifests name `.tally/sdk/host-api` and `../.tally/sdk/chain`, relative; the link is this
//! machine's business, ignored by git, made by `tally new` and re-made by `tally build`
//! whenever it is missing or broken. A registry name patched to a local path was the other
//! way; a project built by plain cargo without the patch would then fetch whatever crate of
//! that name crates.io serves.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The project's link to a Tally checkout, relative to the project's directory.
pub const SDK_LINK: &str = ".tally/sdk";

/// Names a Tally checkout to link projects to, instead of the one this tally was built from.
pub const SDK_ENV: &str = "TALLY_SDK";

/// The checkout this binary was built from.
const BUILT_FROM: &str = env!("CARGO_MANIFEST_DIR");

/// Whether `dir` is a Tally checkout with the crates a project uses.
fn is_checkout(dir: &Path) -> bool {
    let has = |krate: &str, name: &str| {
        std::fs::read_to_string(dir.join(krate).join("Cargo.toml"))
            .is_ok_and(|text| text.contains(&format!("name = \"{name}\"")))
    };
    has("host-api", "tally-host-api") && has("chain", "tally-chain")
}

/// The checkout to link to, absolute: the one whose host-api is `host_api` when given, else
/// `$TALLY_SDK`, else the checkout this tally was built from.
pub fn root(host_api: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (dir, from) = match (
        host_api,
        std::env::var_os(SDK_ENV).filter(|v| !v.is_empty()),
    ) {
        (Some(host_api), _) => (host_api.join(".."), "--host-api"),
        (None, Some(env)) => (PathBuf::from(env), SDK_ENV),
        (None, None) => (PathBuf::from(BUILT_FROM), "built-from"),
    };
    if !is_checkout(&dir) {
        match from {
            "--host-api" => bail!(
                "{} is not the host-api directory of a Tally checkout (no tally-host-api \
                 and tally-chain crates there)",
                host_api.unwrap_or(&dir).display()
            ),
            "built-from" => bail!(
                "this tally was built from a checkout that is no longer at {}: set \
                 {SDK_ENV}=PATH/TO/tally (a checkout of Tally)",
                dir.display()
            ),
            _ => bail!(
                "{SDK_ENV}={} is not a Tally checkout (no host-api and chain crates there)",
                dir.display()
            ),
        }
    }
    dir.canonicalize()
        .with_context(|| format!("cannot resolve {}", dir.display()))
}

/// Points `project`'s [`SDK_LINK`] at the checkout `root`, replacing a link already there.
pub fn link(project: &Path, root: &Path) -> anyhow::Result<()> {
    let link = project.join(SDK_LINK);
    let parent = link.parent().expect("SDK_LINK has a parent");
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    if let Ok(meta) = link.symlink_metadata() {
        // Only a link is ours to replace: a file or directory there is the author's.
        if !meta.file_type().is_symlink() {
            bail!(
                "{} exists and is not a link: move it away (tally keeps a link to Tally's \
                 crates there), then build again",
                link.display()
            );
        }
        std::fs::remove_file(&link)
            .with_context(|| format!("cannot replace the link {}", link.display()))?;
    }
    std::os::unix::fs::symlink(root, &link)
        .with_context(|| format!("cannot link {} to {}", link.display(), root.display()))
}

/// Before building the Rust package in `package`: if its manifest reaches Tally's crates
/// through [`SDK_LINK`] and the link is missing or broken (a fresh clone, a checkout that
/// moved), makes it again and says so.
pub fn ensure_linked(package: &Path) -> anyhow::Result<()> {
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap_or_default();
    // A dependency's path through the link, not a mention of it in a comment.
    let uses_link = manifest.lines().any(|line| {
        let line = line.split('#').next().unwrap_or_default();
        line.contains(&format!("path = \"{SDK_LINK}/"))
    });
    if !uses_link || is_checkout(&package.join(SDK_LINK)) {
        return Ok(());
    }
    let root = root(None)?;
    link(package, &root)?;
    eprintln!(
        "linked {} -> {} (Tally's crates, for this machine)",
        package.join(SDK_LINK).display(),
        root.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_broken_link_is_made_again_and_a_good_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path();
        std::fs::write(
            project.join("Cargo.toml"),
            "[dependencies]\ntally-host-api = { path = \".tally/sdk/host-api\" }\n",
        )
        .unwrap();
        ensure_linked(project).unwrap();
        let built_from = Path::new(BUILT_FROM).canonicalize().unwrap();
        assert_eq!(
            std::fs::read_link(project.join(SDK_LINK)).unwrap(),
            built_from
        );
        // Broken: it points at a checkout that moved.
        link(project, &project.join("gone")).unwrap();
        ensure_linked(project).unwrap();
        assert_eq!(
            std::fs::read_link(project.join(SDK_LINK)).unwrap(),
            built_from
        );
        // A project that does not use the link gets none, even if it mentions it.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(
            other.path().join("Cargo.toml"),
            "[package]\n# no path = \".tally/sdk/host-api\" here\n",
        )
        .unwrap();
        ensure_linked(other.path()).unwrap();
        assert!(other.path().join(SDK_LINK).symlink_metadata().is_err());
        // A file where the link goes is the author's: refused, and kept.
        std::fs::remove_file(project.join(SDK_LINK)).unwrap();
        std::fs::write(project.join(SDK_LINK), "mine").unwrap();
        let err = format!("{:#}", ensure_linked(project).unwrap_err());
        assert!(err.contains("is not a link"), "{err}");
        assert_eq!(std::fs::read(project.join(SDK_LINK)).unwrap(), b"mine");
    }
}
