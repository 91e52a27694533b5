//! Counters every policy keeps, with PyTorch's `memory_stats()` meaning where one exists.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes handed to live allocations, after rounding (PyTorch `allocated_bytes`,
    /// BFC `bytes_in_use`).
    pub allocated: u64,
    pub peak_allocated: u64,
    /// Bytes obtained from the device (segments, mapped pages, regions).
    pub reserved: u64,
    pub peak_reserved: u64,
    /// Unrounded requested bytes of live allocations.
    pub requested: u64,
    pub peak_requested: u64,
    pub num_device_alloc: u64,
    pub num_device_free: u64,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    /// Unified memory (`managed`): 2 MiB pages moved between host and device, and their bytes.
    pub pages_migrated: u64,
    pub bytes_migrated: u64,
}

impl Stats {
    #[inline]
    pub fn add_allocated(&mut self, rounded: u64, requested: u64) {
        self.allocated += rounded;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        self.requested += requested;
        self.peak_requested = self.peak_requested.max(self.requested);
    }
    #[inline]
    pub fn sub_allocated(&mut self, rounded: u64, requested: u64) {
        self.allocated -= rounded;
        self.requested -= requested;
    }
    #[inline]
    pub fn add_reserved(&mut self, bytes: u64) {
        self.reserved += bytes;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
    }
    #[inline]
    pub fn sub_reserved(&mut self, bytes: u64) {
        self.reserved -= bytes;
    }
}
