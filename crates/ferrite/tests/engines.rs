//! The conformance suite on every engine of this build (`EngineKind::ALL`): a new engine is
//! picked up here by itself. Today: SOFORT (persistent, the default), the reference engine (in
//! memory, not persistent) and the paged engine under each commit protocol (`paged-journal`,
//! `paged-wal`, `paged-nvwal`; one writer at a time, so the cases that need two open writers
//! check its `Busy` instead). The persistent ones are reopened in the durability group and the
//! serial model test.

mod conformance;

conformance_suite!(subjects = conformance::engines());

#[test]
fn every_engine_is_a_subject() {
    let names: Vec<&str> = subjects().iter().map(|s| s.name).collect();
    let kinds: Vec<&str> = ferrite::EngineKind::all().map(|k| k.name()).collect();
    assert_eq!(names, kinds);
    for s in subjects() {
        let kind: ferrite::EngineKind = s.name.parse().expect("an engine name");
        assert_eq!(s.open.is_some(), kind.is_persistent(), "{}: open factory", s.name);
    }
}
