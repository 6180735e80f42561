//! Rendezvous (highest-random-weight) hashing: each partition goes to the
//! node with the highest hash of (partition, node). Adding or removing a
//! node moves only the partitions that node wins or held, so the other
//! nodes keep their caches warm.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The index of the node among `nodes` that owns `key`; `None` when there
/// are no nodes.
pub fn pick<N: AsRef<[u8]>>(key: &[u8], nodes: &[N]) -> Option<usize> {
    nodes
        .iter()
        .enumerate()
        .max_by_key(|(_, node)| {
            let seed = xxh3_64_with_seed(node.as_ref(), 0x6b69_6c6e);
            xxh3_64_with_seed(key, seed)
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let nodes = ["a", "b", "c", "d"];
        let fewer = ["a", "b", "d"];
        for k in 0..1000u32 {
            let key = k.to_le_bytes();
            let before = nodes[pick(&key, &nodes).unwrap()];
            let after = fewer[pick(&key, &fewer).unwrap()];
            if before != "c" {
                assert_eq!(before, after, "key {k} moved though its node stayed");
            }
        }
    }

    #[test]
    fn spreads_keys_over_nodes() {
        let nodes = ["a", "b", "c", "d"];
        let mut counts = [0; 4];
        for k in 0..4000u32 {
            counts[pick(&k.to_le_bytes(), &nodes).unwrap()] += 1;
        }
        assert!(counts.iter().all(|&c| c > 700), "{counts:?}");
        assert_eq!(pick::<&str>(b"x", &[]), None);
    }
}
