//! The paged engine (design `docs/design/paged.md`): a slotted-page B+-tree with pluggable
//! commit protocols. This change holds its page stores; the tree, pager, protocols and the
//! engine glue land in later changes.
// Nothing outside the module uses the stores yet (the engine lands in a later change).
#![allow(dead_code)]

pub(crate) mod protocol;
pub(crate) mod store;
