//! `libkiln_cuda.so`: the CUDA injection library (CUPTI) for GPU kernels,
//! SASS instructions and stall reasons.
//!
//! Not built yet: this crate is a placeholder in the workspace. The frame
//! kinds it will produce (`gpu_kernel`, `gpu_instruction`, `gpu_stall`)
//! already exist in [`kiln_model::FrameKind`].
