//! The compile errors of the macros: one mistake per file in `tests/ui/`, each with the
//! `.stderr` the compiler prints. Regenerate after a compiler upgrade with
//! `TRYBUILD=overwrite cargo test --test macros_ui`, and read the diff.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
    // Code that must keep compiling (and running): names the macros must leave free.
    cases.pass("tests/ui/pass/*.rs");
}
