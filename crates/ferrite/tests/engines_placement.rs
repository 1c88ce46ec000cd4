//! The conformance suite on SOFORT with its indexes in PM (`docs/design/sofort.md` §13):
//! every index a hybrid FPTree (`sofort-hybrid`) or a persistent one (`sofort-persistent`).
//! The DRAM placement (the default) is the `sofort` subject of `tests/engines.rs`.

mod conformance;

conformance_suite!(subjects = conformance::sofort_placements());
