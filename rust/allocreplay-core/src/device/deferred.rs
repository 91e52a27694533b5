//! The driver's address placement on a helper thread, for a policy whose decisions never read
//! the addresses it is given ([`crate::policy::Policy::places_without_addresses`]: `cuda-malloc`,
//! whose pages and large allocations are found by index, not by address).
//!
//! Such a policy's summary and timeline do not depend on where the driver put its memory; only
//! its segments table (and placements, built by a replay of their own) shows the addresses.
//! [`DeviceMemory::defer`](super::DeviceMemory::defer) then hands the policy *tokens*, unique
//! stand-ins bumped from a counter, and sends each `cudaMalloc` / `cudaFree` to a thread that
//! runs the same address space (`memory::AddressSpace`) in the same order. At the end the live tokens are turned into
//! the addresses the model gave them ([`Deferred::settle`]). The capacity check stays on the
//! replay's thread, as before; what only the address space can refuse (a request it has no room
//! for: 15 TiB) is found by the helper, and the replay is then run again without it, so that the
//! answer is the one the sequential replay gives in every case.

use std::sync::mpsc;
use std::thread::JoinHandle;

use rustc_hash::FxHashMap;

/// A change of the driver's address space that the GPU trace does not record, applied before
/// a row of the replay ([`crate::engine`]'s schedule of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressChange {
    /// The host process freed (`freed`) or mapped `[start, end)`, in the model's coordinates
    /// (`AddressSpace::add_host_free`, `AddressSpace::take_host`).
    Host { start: u64, end: u64, freed: bool },
    /// The driver's local memory grew by `bytes` (`AddressSpace::grow_local_memory`).
    LocalMemoryGrows { bytes: u64 },
    /// The driver (or a library: cuBLAS, a module's code) allocated `bytes` for itself, never
    /// freed (`AddressSpace::malloc`).
    DriverMalloc { bytes: u64 },
}

/// What the helper runs: the driver's placement (`memory::AddressSpace`), as `DeviceMemory`
/// calls it.
pub(crate) trait AddressPlacer: Send + 'static {
    /// `cudaMalloc(size)`'s address, or `None` when there is no room.
    fn malloc(&mut self, size: u64) -> Option<u64>;
    /// `cudaFree(addr)`.
    fn free(&mut self, addr: u64);
    /// A change the trace does not record (a host range, the driver's local memory).
    fn changed(&mut self, change: AddressChange);
}

/// `cudaMalloc`s and `cudaFree`s sent to the helper at a time: (token, size) for a malloc,
/// (token, 0) for a free; a host range's change is two entries, ([`HOST_FREED`] or
/// [`HOST_TAKEN`], start) and (end, 0), sent together; a growth of the local memory or a
/// driver's allocation one, ([`LOCAL_MEMORY_GROWS`] or [`DRIVER_MALLOC`], bytes).
const BATCH: usize = 4096;

/// Markers of a host range's change (below every token).
const HOST_FREED: u64 = 1;
const HOST_TAKEN: u64 = 2;
/// Markers of a growth of the driver's local memory and of a driver's allocation (below every
/// token).
const LOCAL_MEMORY_GROWS: u64 = 3;
const DRIVER_MALLOC: u64 = 4;

/// The first token (any start works; a recognisable one reads better in a debugger).
const FIRST_TOKEN: u64 = 1 << 48;

/// The replay's side: tokens, and the calls on their way to the helper.
pub(crate) struct Deferred {
    next: u64,
    ops: Vec<(u64, u64)>,
    to_helper: Option<mpsc::Sender<Vec<(u64, u64)>>>,
    /// Emptied batches coming back for reuse.
    spare: mpsc::Receiver<Vec<(u64, u64)>>,
    helper: Option<JoinHandle<Option<FxHashMap<u64, u64>>>>,
    /// A call the helper does not model was made (or the tokens ran out): the replay must be
    /// run again with the address space in line.
    unsupported: bool,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred").field("next", &self.next).field("queued", &self.ops.len()).finish_non_exhaustive()
    }
}

impl Deferred {
    /// A helper started on `va`; `None` when no thread could be started (the caller then
    /// places addresses itself).
    pub(crate) fn start(mut va: impl AddressPlacer) -> Option<Deferred> {
        let (to_helper, from_replay) = mpsc::channel::<Vec<(u64, u64)>>();
        let (back, spare) = mpsc::channel();
        let helper = std::thread::Builder::new()
            .name("allocreplay-addresses".into())
            .spawn(move || {
                let mut real: FxHashMap<u64, u64> = FxHashMap::default();
                for mut batch in from_replay {
                    let mut i = 0;
                    while i < batch.len() {
                        let (token, size) = batch[i];
                        if token == HOST_FREED || token == HOST_TAKEN {
                            va.changed(AddressChange::Host { start: size, end: batch[i + 1].0, freed: token == HOST_FREED });
                            i += 2;
                            continue;
                        }
                        if token == LOCAL_MEMORY_GROWS || token == DRIVER_MALLOC {
                            va.changed(if token == DRIVER_MALLOC {
                                AddressChange::DriverMalloc { bytes: size }
                            } else {
                                AddressChange::LocalMemoryGrows { bytes: size }
                            });
                            i += 1;
                            continue;
                        }
                        if size > 0 {
                            // `DeviceMemory::malloc`'s `self.va.malloc(size)?`.
                            real.insert(token, va.malloc(size)?);
                        } else if let Some(addr) = real.remove(&token) {
                            va.free(addr);
                        }
                        i += 1;
                    }
                    batch.clear();
                    let _ = back.send(batch);
                }
                Some(real)
            })
            .ok()?;
        Some(Deferred {
            next: FIRST_TOKEN,
            ops: Vec::with_capacity(BATCH),
            to_helper: Some(to_helper),
            spare,
            helper: Some(helper),
            unsupported: false,
        })
    }

    /// `cudaMalloc(size)` (capacity already checked): its token.
    #[inline]
    pub(crate) fn malloc(&mut self, size: u64) -> u64 {
        let token = self.next;
        match self.next.checked_add(size.max(1)) {
            Some(n) => self.next = n,
            None => self.unsupported = true,
        }
        self.push((token, size.max(1)));
        token
    }

    /// `cudaFree` of a token.
    #[inline]
    pub(crate) fn free(&mut self, token: u64) {
        self.push((token, 0));
    }

    /// A change the trace does not record: applied by the helper in its place among the calls.
    pub(crate) fn changed(&mut self, change: AddressChange) {
        match change {
            AddressChange::Host { start, end, freed } => {
                // Both entries in one batch: `push` sends only once the pair is in.
                self.ops.push((if freed { HOST_FREED } else { HOST_TAKEN }, start));
                self.push((end, 0));
            }
            AddressChange::LocalMemoryGrows { bytes } => self.push((LOCAL_MEMORY_GROWS, bytes)),
            AddressChange::DriverMalloc { bytes } => self.push((DRIVER_MALLOC, bytes)),
        }
    }

    /// A call outside `malloc` / `free`: the replay is run again with the address space in line.
    pub(crate) fn unsupported(&mut self) {
        self.unsupported = true;
    }

    #[inline]
    fn push(&mut self, op: (u64, u64)) {
        self.ops.push(op);
        if self.ops.len() >= BATCH {
            self.send();
        }
    }

    #[inline(never)]
    fn send(&mut self) {
        let fresh = self.spare.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.ops, fresh);
        if let Some(tx) = &self.to_helper {
            // The helper stopped (the address space ran out): `settle` says so.
            let _ = tx.send(full);
        }
    }

    /// Waits for the helper: the address the model gave each live token, or `None` when the
    /// address space refused a request (or a call it does not model was made), so that the
    /// replay's answer is not the sequential one.
    pub(crate) fn settle(mut self) -> Option<FxHashMap<u64, u64>> {
        if !self.ops.is_empty() {
            self.send();
        }
        drop(self.to_helper.take());
        let real = self.helper.take()?.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        if self.unsupported {
            return None;
        }
        real
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::AddressSpace;
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn tokens_settle_to_the_addresses_the_model_gives_in_line() {
        // The same calls through the helper and straight into an address space.
        let mut d = Deferred::start(AddressSpace::new()).expect("a thread");
        let mut va = AddressSpace::new();
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut rng = crate::test_rng::XorShift64::new(7);
        // Host ranges freed and taken again above the context (issue 29), now and then, and
        // the local memory grown.
        let above = AddressSpace::new().malloc(2 * MIB).expect("room") + (1 << 30);
        for step in 0..20_000 {
            let x = rng.next_u64();
            if step % 97 == 0 {
                let start = above + (x >> 20) % 4096 * MIB + (x % 3) * 4096;
                let end = start + (1 + (x >> 40) % 200) * MIB;
                let change = AddressChange::Host { start, end, freed: !x.is_multiple_of(5) };
                d.changed(change);
                va.changed(change);
                continue;
            }
            if step % 1001 == 500 {
                // The driver's local memory grows now and then, or the driver allocates.
                let bytes = (1 + x % 64) * 2 * MIB;
                let change =
                    if x.is_multiple_of(2) { AddressChange::LocalMemoryGrows { bytes } } else { AddressChange::DriverMalloc { bytes } };
                d.changed(change);
                va.changed(change);
                continue;
            }
            if live.len() < 8 || !x.is_multiple_of(3) {
                let size = (1 + x % 40) * 2 * MIB;
                live.push((d.malloc(size), va.malloc(size).expect("room")));
            } else {
                let (token, addr) = live.swap_remove((x >> 8) as usize % live.len());
                d.free(token);
                va.free(addr);
            }
        }
        let real = d.settle().expect("settled");
        assert_eq!(real.len(), live.len());
        for (token, addr) in live {
            assert_eq!(real[&token], addr);
        }
    }

    #[test]
    fn a_request_the_address_space_cannot_hold_unsettles_the_replay() {
        let mut d = Deferred::start(AddressSpace::new()).expect("a thread");
        d.malloc(1 << 50); // far beyond the modelled 15 TiB
        assert!(d.settle().is_none());
        let mut d = Deferred::start(AddressSpace::new()).expect("a thread");
        d.malloc(2 * MIB);
        d.unsupported();
        assert!(d.settle().is_none());
    }
}
