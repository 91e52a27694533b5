//! Invariants every policy keeps, checked over a stream of requests (the property tests in
//! tests/properties.rs and the policy fuzz targets in fuzz/ use this): live blocks never
//! overlap, allocated ≤ reserved ≤ capacity, a failed request allocates nothing, everything
//! freed → allocated 0. docs/bad-inputs.md.

use std::collections::BTreeMap;

use super::build;
use crate::device::DeviceMemory;
use crate::device::Stats;
use crate::policy::{PolicyContext, Request};
use crate::trace::{DeviceInfo, TraceMetadata};

/// One step of a request stream. Frees name the `k`-th live allocation (modulo their count),
/// so any stream is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Alloc { size: u64, stream: i64 },
    FreeRequested(usize),
    FreeCompleted(usize),
}

/// Decodes fuzzer bytes into a stream: 5 bytes an op (kind, size class and bits, stream).
pub fn ops_from_bytes(data: &[u8]) -> Vec<Op> {
    data.chunks_exact(5)
        .map(|c| {
            let v = u32::from_le_bytes([c[1], c[2], c[3], c[4]]);
            match c[0] % 8 {
                0..=3 => {
                    let size = match c[0] >> 3 {
                        0 => u64::MAX - v as u64,
                        1 => (1u64 << 56) + v as u64,
                        2..=5 => (v as u64) << 12,
                        6..=15 => v as u64 % (4 << 20),
                        _ => v as u64 % 4096,
                    };
                    Op::Alloc { size, stream: (c[1] % 3) as i64 }
                }
                4 | 5 => Op::FreeRequested(v as usize),
                _ => Op::FreeCompleted(v as usize),
            }
        })
        .collect()
}

/// Policies whose memory is taken back when the program frees (`free_requested`): `cudaFree`
/// synchronises the device, so no stream can still use it. The others keep a block until its
/// `free_completed` (`record_stream` / stream-ordered frees).
pub fn frees_on_request(spec: &str) -> bool {
    let name = spec.split(':').next().unwrap_or(spec);
    matches!(name, "cuda-malloc" | "managed")
}

/// Replays `ops` through the policy `spec` under `capacity`, checking the invariants after
/// every step; at the end frees everything left. Returns the final stats, or the first
/// violation. `managed` oversubscribes: its reserved bytes are the resident ones, so
/// `allocated ≤ reserved` is not one of its invariants (it fails a request only when the
/// simulated address space has no room for it, or from [`super::MAX_REQUEST`] bytes).
pub fn run_checked(spec: &str, ops: &[Op], capacity: Option<u64>) -> Result<Stats, String> {
    let mut md = TraceMetadata::new("test");
    md.devices = vec![DeviceInfo { index: 0, total_memory: Some(80 << 30), ..Default::default() }];
    let ctx = PolicyContext { metadata: &md, device: md.devices.first(), capacity };
    let mut p = build(spec, &ctx).map_err(|e| e.to_string())?;
    let mut dev = DeviceMemory::new(capacity);
    let oversubscribes = spec.starts_with("managed");
    let on_request = frees_on_request(spec);
    // Live ids (allocated, not completely freed), in allocation order; whether their free was
    // requested; placed ranges of the blocks still holding memory: addr -> (end, id).
    let mut live: Vec<(u64, bool)> = Vec::new();
    let mut held: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut range_of: Vec<Option<u64>> = Vec::new();
    let mut next_id = 0u64;
    let release = |held: &mut BTreeMap<u64, (u64, u64)>, range_of: &mut Vec<Option<u64>>, id: u64| {
        if let Some(a) = range_of[id as usize].take() {
            held.remove(&a);
        }
    };
    for (step, &op) in ops.iter().enumerate() {
        match op {
            Op::Alloc { size, stream } => {
                let id = next_id;
                next_id += 1;
                range_of.push(None);
                let before = p.stats().clone();
                let r = Request { event: step, id, size, stream, pool: 0, recorded_addr: None, recorded_chunk: None };
                let res = p.malloc(&r, &mut dev);
                if p.stats().num_alloc_retries > before.num_alloc_retries {
                    // A retry after freeing the cache synchronises the pending frees' streams
                    // (PyTorch: synchronize_and_free_events): their memory may be reused now.
                    for &(pid, requested) in &live {
                        if requested {
                            release(&mut held, &mut range_of, pid);
                        }
                    }
                }
                match res {
                    Ok(pl) => {
                        if pl.size < size {
                            return Err(format!("step {step}: a block of {} bytes for a request of {size}", pl.size));
                        }
                        if pl.size > 0 {
                            let end = pl.addr.checked_add(pl.size).ok_or_else(|| format!("step {step}: block wraps the address space"))?;
                            if let Some((&a, &(e, other))) = held.range(..end).next_back() {
                                if e > pl.addr {
                                    return Err(format!(
                                        "step {step}: block [{:#x}, {end:#x}) of id {id} overlaps [{a:#x}, {e:#x}) of live id {other}",
                                        pl.addr
                                    ));
                                }
                            }
                            held.insert(pl.addr, (end, id));
                            range_of[id as usize] = Some(pl.addr);
                        }
                        live.push((id, false));
                    }
                    Err(_) => {
                        // A failed request allocates nothing; it may complete pending frees
                        // (PyTorch's release_cached_blocks synchronises their events).
                        let after = p.stats();
                        if after.allocated > before.allocated || after.requested > before.requested || after.num_ooms != before.num_ooms + 1
                        {
                            return Err(format!("step {step}: a failed request allocated or miscounted: {before:?} -> {after:?}"));
                        }
                    }
                }
            }
            Op::FreeRequested(k) => {
                let open: Vec<usize> = (0..live.len()).filter(|&i| !live[i].1).collect();
                if open.is_empty() {
                    continue;
                }
                let i = open[k % open.len()];
                let id = live[i].0;
                live[i].1 = true;
                p.free_requested(id, &mut dev);
                if on_request {
                    release(&mut held, &mut range_of, id);
                }
            }
            Op::FreeCompleted(k) => {
                if live.is_empty() {
                    continue;
                }
                let i = k % live.len();
                let (id, requested) = live.remove(i);
                if !requested {
                    p.free_requested(id, &mut dev);
                }
                p.free_completed(id, &mut dev);
                release(&mut held, &mut range_of, id);
            }
        }
        let s = p.stats();
        if !oversubscribes && s.allocated > s.reserved {
            return Err(format!("step {step}: allocated {} > reserved {}", s.allocated, s.reserved));
        }
        if let Some(cap) = capacity {
            if s.reserved > cap {
                return Err(format!("step {step}: reserved {} > capacity {cap}", s.reserved));
            }
        }
    }
    for (id, requested) in std::mem::take(&mut live) {
        if !requested {
            p.free_requested(id, &mut dev);
        }
        p.free_completed(id, &mut dev);
    }
    let s = p.stats().clone();
    if s.allocated != 0 || s.requested != 0 {
        return Err(format!("everything freed, yet allocated {} and requested {} remain", s.allocated, s.requested));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simple_stream_passes_in_every_policy() {
        let ops = [
            Op::Alloc { size: 1000, stream: 0 },
            Op::Alloc { size: 3 << 20, stream: 1 },
            Op::FreeRequested(0),
            Op::Alloc { size: u64::MAX, stream: 0 },
            Op::Alloc { size: 512, stream: 0 },
            Op::FreeCompleted(0),
        ];
        for spec in ["pytorch", "bfc", "cuda-async", "cuda-malloc", "managed"] {
            run_checked(spec, &ops, Some(1 << 30)).unwrap_or_else(|e| panic!("{spec}: {e}"));
        }
    }

    #[test]
    fn ops_decode_five_bytes_each() {
        assert_eq!(
            ops_from_bytes(&[0, 1, 0, 0, 0, 4, 9, 0, 0, 0, 7]),
            vec![Op::Alloc { size: u64::MAX - 1, stream: 1 }, Op::FreeRequested(9)]
        );
    }
}
