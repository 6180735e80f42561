//! What opening NVML can fail with.

use std::path::PathBuf;

use super::abi;

/// Why NVML could not be opened. Reading never fails: a metric that
/// cannot be read is left out (see [`Nvml::read`](super::Nvml::read)).
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// No libnvidia-ml could be loaded: no NVIDIA driver on this host
    /// (see [`NvmlError::is_absent`]).
    #[error(
        "libnvidia-ml not found (no NVIDIA driver here? set KILN_NVML_PATH); tried: {}",
        tried.iter().map(|(p, e)| format!("{} ({e})", p.display())).collect::<Vec<_>>().join("; ")
    )]
    NotFound {
        /// Every path tried, with the dynamic loader's answer.
        tried: Vec<(PathBuf, String)>,
    },
    /// The library lacks a function Kiln calls: not NVML, or a driver
    /// older than R450.
    #[error("{} has no {symbol} (not NVML, or too old a driver)", path.display())]
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// The function it lacks.
        symbol: &'static str,
        /// The dynamic loader's answer.
        #[source]
        source: libloading::Error,
    },
    /// An NVML call that opening needs failed.
    #[error("{call} failed: {message} (NVML error {code})")]
    Call {
        /// The function, as nvml.h names it.
        call: &'static str,
        /// Its `nvmlReturn_t`.
        code: u32,
        /// What `nvmlErrorString` says of it.
        message: String,
    },
}

impl NvmlError {
    /// Whether this host simply has no NVIDIA GPU to read: no library, or
    /// a library whose kernel driver is not loaded. The agent then runs
    /// without GPU metrics and says so once, at info level, rather than
    /// reporting an error.
    pub fn is_absent(&self) -> bool {
        match self {
            NvmlError::NotFound { .. } => true,
            NvmlError::Call { call, code, .. } => {
                *call == "nvmlInit_v2"
                    && matches!(
                        *code,
                        abi::ERROR_DRIVER_NOT_LOADED | abi::ERROR_LIBRARY_NOT_FOUND
                    )
            }
            NvmlError::MissingSymbol { .. } => false,
        }
    }
}
