//! The `production` profile the deployment guide tells a service to copy is the one this
//! workspace builds with (its `Cargo.toml`), and the one the Dockerfile uses: the guide's block
//! is not Rust, so no doctest holds it, and this does.

use std::path::Path;

fn read(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The `[profile.production]` table of a TOML document.
fn production(document: &str, whence: &str) -> toml::Table {
    let parsed: toml::Table = document
        .parse()
        .unwrap_or_else(|err| panic!("{whence} is not TOML: {err}"));
    parsed
        .get("profile")
        .and_then(|profiles| profiles.get("production"))
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_else(|| panic!("{whence} has no [profile.production]"))
}

/// The guide's one TOML block, under its heading "A production build".
fn guide_block() -> String {
    let guide = read("docs/deployment.md");
    let section = guide
        .split_once("## A production build\n")
        .map(|(_, rest)| rest)
        .expect("docs/deployment.md has a section \"A production build\"");
    section
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block.to_owned())
        .expect("the section has a ```toml block")
}

/// What the profile is: `release`, optimised at link time across crates, one code unit each.
const PROFILE: &str =
    "[profile.production]\ninherits = \"release\"\nlto = \"fat\"\ncodegen-units = 1\n";

#[test]
fn the_guide_gives_the_workspace_profile() {
    let workspace = production(&read("Cargo.toml"), "Cargo.toml");
    let guide = production(&guide_block(), "the guide's block");
    assert_eq!(
        guide, workspace,
        "docs/deployment.md's [profile.production] differs from Cargo.toml's"
    );
    assert_eq!(
        workspace,
        production(PROFILE, "the expected profile"),
        "Cargo.toml's [profile.production] is not release + fat LTO + one code unit"
    );
}

#[test]
fn the_image_is_built_with_it() {
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains("cargo build --profile production --locked --example payments"),
        "the Dockerfile's build stage does not build with the production profile"
    );
    assert!(
        dockerfile.contains("target/production/examples/payments"),
        "the Dockerfile copies the binary from somewhere else than target/production"
    );
}
