//! Symbolization for Kiln: extraction of ELF and DWARF symbols, the `ksym`
//! symbol file format, and the symbolizer worker actors.
//!
//! Not built yet: this crate is a placeholder in the workspace so that the
//! dependency graph of `docs/architecture.md` holds from the start. Until it
//! lands, native frames stay as (file id, address) and the query side names
//! them `module+0xaddr`.
