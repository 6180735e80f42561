//! Interning of functions and files into the indexes of a
//! [`SymbolTable`](crate::table::SymbolTable).

use std::collections::HashMap;
use std::hash::Hash;

/// Hands out one index per distinct value, in order of first sight.
#[derive(Debug)]
pub(super) struct Interner<T> {
    index: HashMap<T, u32>,
    values: Vec<T>,
}

impl<T: Clone + Eq + Hash> Interner<T> {
    pub(super) fn new() -> Self {
        Interner {
            index: HashMap::new(),
            values: Vec::new(),
        }
    }

    /// The index of `value`, adding it if it is new.
    pub(super) fn intern(&mut self, value: T) -> u32 {
        if let Some(&i) = self.index.get(&value) {
            return i;
        }
        // Tables beyond 4G entries cannot be encoded; such an input would
        // have failed long before (the ELF itself would be that large).
        let i = u32::try_from(self.values.len()).unwrap_or(u32::MAX - 1);
        self.index.insert(value.clone(), i);
        self.values.push(value);
        i
    }

    pub(super) fn get(&self, i: u32) -> Option<&T> {
        self.values.get(i as usize)
    }

    pub(super) fn into_values(self) -> Vec<T> {
        self.values
    }
}
