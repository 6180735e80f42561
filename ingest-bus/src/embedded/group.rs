//! Consumer groups: their committed offsets and live members, and which
//! partitions each member reads.
//!
//! As in Kafka, a group's members share its partitions: partition `p` goes
//! to the member at index `p % members` in join order. When a member joins
//! or leaves, the generation changes and every member picks up its new
//! share at its next poll, starting a newly assigned partition from the
//! group's committed offset (so records the previous owner read but did not
//! commit are delivered again: at least once).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::embedded::{fs, offsets};
use crate::error::{BusError, io};

/// Every group of a bus.
#[derive(Debug)]
pub(crate) struct Groups {
    dir: PathBuf,
    partitions: u32,
    groups: Mutex<BTreeMap<String, Arc<Group>>>,
}

/// One consumer group.
#[derive(Debug)]
pub(crate) struct Group {
    name: Arc<str>,
    path: PathBuf,
    state: Mutex<GroupState>,
}

#[derive(Debug)]
struct GroupState {
    committed: Vec<u64>,
    /// Live members' ids; ids grow, so this is join order.
    members: BTreeSet<u64>,
    next_member: u64,
    /// Changes whenever `members` does.
    generation: u64,
}

impl Groups {
    /// Loads the groups stored in `dir`, creating it if needed.
    pub(crate) fn load(dir: PathBuf, partitions: u32) -> Result<Groups, BusError> {
        fs::create_dir(&dir)?;
        let groups = offsets::load_all(&dir, partitions)?
            .into_iter()
            .map(|(name, committed)| {
                let group = Group::new(&dir, &name, committed);
                (name, Arc::new(group))
            })
            .collect();
        Ok(Groups {
            dir,
            partitions,
            groups: Mutex::new(groups),
        })
    }

    /// The group named `name`, created durably if new, starting at
    /// `start_offsets` (where the partitions begin now).
    pub(crate) fn get_or_create(
        &self,
        name: &str,
        start_offsets: impl FnOnce() -> Vec<u64>,
    ) -> Result<Arc<Group>, BusError> {
        offsets::validate_group_name(name)?;
        let mut groups = self.lock();
        if let Some(group) = groups.get(name) {
            return Ok(group.clone());
        }
        let committed = start_offsets();
        debug_assert_eq!(committed.len(), self.partitions as usize);
        let group = Group::new(&self.dir, name, committed);
        // Stored before anyone reads through it, so retention counts the new
        // group from the start.
        offsets::store(&group.path, &group.committed())?;
        tracing::info!(group = name, "created consumer group");
        let group = Arc::new(group);
        groups.insert(name.to_owned(), group.clone());
        Ok(group)
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<Group>> {
        self.lock().get(name).cloned()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Runs `f` with the lowest committed offset of each partition over all
    /// groups (`None` when there are no groups), keeping groups from being
    /// created meanwhile, so that a new group cannot start inside a segment
    /// `f` is deleting.
    pub(crate) fn with_min_committed<R>(&self, f: impl FnOnce(Option<&[u64]>) -> R) -> R {
        let groups = self.lock();
        let mut min: Option<Vec<u64>> = None;
        for group in groups.values() {
            let committed = group.committed();
            match &mut min {
                None => min = Some(committed),
                Some(min) => min
                    .iter_mut()
                    .zip(committed)
                    .for_each(|(m, c)| *m = (*m).min(c)),
            }
        }
        f(min.as_deref())
    }

    /// Forgets a group and its committed offsets. `Ok(false)` if there was
    /// no such group.
    pub(crate) fn delete(&self, name: &str) -> Result<bool, BusError> {
        offsets::validate_group_name(name)?;
        let mut groups = self.lock();
        let Some(group) = groups.get(name) else {
            return Ok(false);
        };
        let members = group.state().members.len();
        if members > 0 {
            return Err(BusError::GroupInUse {
                group: name.to_owned(),
                members,
            });
        }
        std::fs::remove_file(&group.path).map_err(io("remove", &group.path))?;
        fs::sync_dir(&self.dir)?;
        groups.remove(name);
        tracing::info!(group = name, "deleted consumer group");
        Ok(true)
    }

    // The map is only ever changed by single inserts and removes, so a
    // poisoned lock still guards a consistent map.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Group>>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Group {
    fn new(dir: &Path, name: &str, committed: Vec<u64>) -> Group {
        Group {
            name: name.into(),
            path: offsets::path(dir, name),
            state: Mutex::new(GroupState {
                committed,
                members: BTreeSet::new(),
                next_member: 0,
                generation: 0,
            }),
        }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The offsets the group resumes at, by partition.
    pub(crate) fn committed(&self) -> Vec<u64> {
        self.state().committed.clone()
    }

    /// Durably records where the group resumes each of these partitions,
    /// all in one write of the offsets file.
    ///
    /// Blocks on file I/O: call it from a blocking thread.
    pub(crate) fn commit_all(&self, positions: &[(u32, u64)]) -> Result<(), BusError> {
        let mut state = self.state();
        let mut committed = state.committed.clone();
        let count = committed.len() as u32;
        for &(partition, offset) in positions {
            *committed
                .get_mut(partition as usize)
                .ok_or(BusError::NoSuchPartition { partition, count })? = offset;
        }
        // Only a stored commit counts: the in-memory offsets change after
        // the file does.
        offsets::store(&self.path, &committed)?;
        state.committed = committed;
        Ok(())
    }

    /// Adds a member; returns its id.
    pub(crate) fn join(&self) -> u64 {
        let mut state = self.state();
        let id = state.next_member;
        state.next_member += 1;
        state.members.insert(id);
        state.generation += 1;
        id
    }

    pub(crate) fn leave(&self, member: u64) {
        let mut state = self.state();
        if state.members.remove(&member) {
            state.generation += 1;
        }
    }

    /// The current generation and the partitions `member` reads in it.
    pub(crate) fn assignment(&self, member: u64, partitions: u32) -> (u64, Vec<u32>) {
        let state = self.state();
        let assigned = match state.members.iter().position(|&m| m == member) {
            Some(index) => {
                let n = state.members.len() as u32;
                (0..partitions).filter(|p| p % n == index as u32).collect()
            }
            None => Vec::new(),
        };
        (state.generation, assigned)
    }

    // Every change to the state is a single assignment after any fallible
    // step, so a poisoned lock still guards a consistent state.
    fn state(&self) -> MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Members split the partitions between them, and the survivors take
    /// over a leaver's share.
    #[test]
    fn members_share_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let groups = Groups::load(dir.path().to_path_buf(), 4).unwrap();
        let g = groups.get_or_create("g", || vec![0; 4]).unwrap();
        let a = g.join();
        let b = g.join();
        let (gen1, share_a) = g.assignment(a, 4);
        assert_eq!((share_a, g.assignment(b, 4).1), (vec![0, 2], vec![1, 3]));
        g.leave(a);
        let (gen2, share_b) = g.assignment(b, 4);
        assert_ne!(gen1, gen2);
        assert_eq!((share_b, g.assignment(a, 4).1), (vec![0, 1, 2, 3], vec![]));
    }

    #[test]
    fn commits_persist_and_groups_reload() {
        let dir = tempfile::tempdir().unwrap();
        let groups = Groups::load(dir.path().to_path_buf(), 2).unwrap();
        groups
            .get_or_create("g", || vec![1, 1])
            .unwrap()
            .commit_all(&[(1, 7)])
            .unwrap();
        groups.get_or_create("h", || vec![3, 0]).unwrap();
        let min = groups.with_min_committed(|m| m.map(<[u64]>::to_vec));
        assert_eq!(min, Some(vec![1, 0]));
        let reloaded = Groups::load(dir.path().to_path_buf(), 2).unwrap();
        assert_eq!(reloaded.names(), ["g", "h"]);
        assert_eq!(reloaded.get("g").unwrap().committed(), vec![1, 7]);
    }

    #[test]
    fn groups_in_use_are_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let groups = Groups::load(dir.path().to_path_buf(), 1).unwrap();
        let g = groups.get_or_create("g", || vec![0]).unwrap();
        let member = g.join();
        assert!(matches!(
            groups.delete("g"),
            Err(BusError::GroupInUse { members: 1, .. })
        ));
        g.leave(member);
        assert!(groups.delete("g").unwrap());
        assert!(!groups.delete("g").unwrap());
        assert!(groups.with_min_committed(|m| m.is_none()));
    }
}
