//! The PyTorch CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`, PyTorch 2.11).
//! (Being written.)

use super::spec::PolicyContext;
use super::Policy;
use crate::error::{Error, Result};

pub fn from_spec(_options: &str, _ctx: &PolicyContext) -> Result<Box<dyn Policy>> {
    Err(Error::PolicySpec("the pytorch policy is not implemented yet".into()))
}
