//! `USED_STATIC_FNS` in build.rs lists the DPDK `static inline` functions
//! whose wrappers are compiled. A call to one not listed fails to link; this
//! test catches the other way round: a listed one no longer called, whose
//! wrapper (and its share of the build) would stay for nothing.
use std::path::Path;

fn listed() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = std::fs::read_to_string(dir.join("build.rs")).expect("read build.rs");
    let start = build
        .find("const USED_STATIC_FNS")
        .expect("build.rs has USED_STATIC_FNS");
    let body = &build[start..start + build[start..].find("];").expect("the list ends")];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn sources() -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = String::new();
    for entry in std::fs::read_dir(src).expect("read src/") {
        let path = entry.expect("a src/ entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            all += &std::fs::read_to_string(&path).expect("read a source file");
        }
    }
    all
}

#[test]
fn every_listed_static_fn_is_called() {
    let names = listed();
    assert!(names.len() >= 10, "parsed too few names: {names:?}");
    let src = sources();
    let called = |n: &str| src.contains(&format!("ffi::{n}("));
    let stale: Vec<&String> = names.iter().filter(|n| !called(n)).collect();
    assert!(
        stale.is_empty(),
        "USED_STATIC_FNS in build.rs lists functions src/ never calls as ffi::NAME(: {stale:?}"
    );
}
