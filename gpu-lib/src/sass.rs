//! Naming SASS instructions for `gpu_instruction` frames: the cubins the
//! library sends, kept in a bounded store on the agent's side, and
//! disassembled with `nvdisasm` when it is installed (`$KILN_NVDISASM`, or
//! `nvdisasm` on the `PATH`). Without it frames show the PC offset alone.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::Command;

use crate::wire::Cubin;

/// One cubin's instructions: function → PC offset → text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disassembly {
    functions: HashMap<String, BTreeMap<u64, String>>,
}

/// `nvdisasm` could not be run or failed.
#[derive(Debug, thiserror::Error)]
pub enum DisassembleError {
    /// Writing the cubin to a temporary file, or starting the tool.
    #[error("running nvdisasm: {0}")]
    Io(#[from] std::io::Error),
    /// The tool ran and failed.
    #[error("nvdisasm failed: {0}")]
    Failed(String),
}

impl Disassembly {
    /// Reads `nvdisasm` output: a function starts at a `.text.<name>:`
    /// label; instructions are `/*<hex offset>*/  <text> ;` lines.
    pub fn parse(output: &str) -> Self {
        let mut functions: HashMap<String, BTreeMap<u64, String>> = HashMap::new();
        let mut current: Option<String> = None;
        for line in output.lines() {
            let line = line.trim();
            if let Some(name) = line
                .strip_prefix(".text.")
                .and_then(|l| l.strip_suffix(':'))
            {
                current = Some(name.to_owned());
                continue;
            }
            let Some(function) = &current else { continue };
            let Some(rest) = line.strip_prefix("/*") else {
                continue;
            };
            let Some((offset, text)) = rest.split_once("*/") else {
                continue;
            };
            let Ok(offset) = u64::from_str_radix(offset.trim(), 16) else {
                continue;
            };
            // Drop the `;` and any trailing encoding comment.
            let text = text
                .split("/*")
                .next()
                .unwrap_or("")
                .trim()
                .trim_end_matches(';')
                .trim();
            if !text.is_empty() {
                functions
                    .entry(function.clone())
                    .or_default()
                    .insert(offset, text.to_owned());
            }
        }
        Self { functions }
    }

    /// Runs `nvdisasm` on a cubin.
    pub fn of_cubin(image: &[u8]) -> Result<Self, DisassembleError> {
        let tool = std::env::var_os("KILN_NVDISASM").unwrap_or_else(|| "nvdisasm".into());
        let mut file = tempfile::Builder::new()
            .prefix("kiln-")
            .suffix(".cubin")
            .tempfile()?;
        std::io::Write::write_all(&mut file, image)?;
        let output = Command::new(tool).arg(file.path()).output()?;
        if !output.status.success() {
            return Err(DisassembleError::Failed(
                String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            ));
        }
        Ok(Self::parse(&String::from_utf8_lossy(&output.stdout)))
    }

    /// The instruction of `function` at `pc_offset`.
    pub fn instruction(&self, function: &str, pc_offset: u64) -> Option<&str> {
        self.functions
            .get(function)?
            .get(&pc_offset)
            .map(String::as_str)
    }
}

/// Cubins by CRC, at most `max_bytes` of them (oldest go first), each
/// disassembled once, when an instruction of it is first asked for.
#[derive(Debug)]
pub struct CubinStore {
    max_bytes: usize,
    bytes: usize,
    images: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    disassembled: HashMap<u64, Option<Disassembly>>,
}

impl CubinStore {
    /// An empty store of at most `max_bytes` of cubins.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            bytes: 0,
            images: HashMap::new(),
            order: VecDeque::new(),
            disassembled: HashMap::new(),
        }
    }

    /// Keeps a cubin (a snapshot's [`crate::Snapshot::cubins`]).
    pub fn add(&mut self, cubin: &Cubin) {
        if cubin.image.len() > self.max_bytes || self.images.contains_key(&cubin.crc) {
            return;
        }
        while self.bytes + cubin.image.len() > self.max_bytes {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(image) = self.images.remove(&old) {
                self.bytes -= image.len();
            }
            self.disassembled.remove(&old);
        }
        self.bytes += cubin.image.len();
        self.images.insert(cubin.crc, cubin.image.clone());
        self.order.push_back(cubin.crc);
    }

    /// The instruction at `pc_offset` of `function` in the cubin `crc`, if
    /// the cubin is here and `nvdisasm` could read it.
    pub fn instruction(&mut self, crc: u64, function: &str, pc_offset: u64) -> Option<String> {
        if !self.disassembled.contains_key(&crc) {
            let image = self.images.get(&crc)?;
            self.disassembled
                .insert(crc, Disassembly::of_cubin(image).ok());
        }
        self.disassembled
            .get(&crc)?
            .as_ref()?
            .instruction(function, pc_offset)
            .map(str::to_owned)
    }

    /// Bytes of cubins held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = r#"
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
	.section	.text._Z6vecAddPfS_S_i,"ax",@progbits
	.align	128
        .global         _Z6vecAddPfS_S_i
_Z6vecAddPfS_S_i:
.text._Z6vecAddPfS_S_i:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R6, SR_CTAID.X ;
        /*0090*/                   LDG.E R2, desc[UR4][R2.64] ;  /* 0x0000000402027981 */
        /*00f0*/              @!P0 EXIT ;
.text._Z4relu:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
"#;

    #[test]
    fn parses_nvdisasm_output() {
        let d = Disassembly::parse(OUTPUT);
        assert_eq!(
            d.instruction("_Z6vecAddPfS_S_i", 0x90),
            Some("LDG.E R2, desc[UR4][R2.64]")
        );
        assert_eq!(d.instruction("_Z6vecAddPfS_S_i", 0xf0), Some("@!P0 EXIT"));
        assert_eq!(d.instruction("_Z4relu", 0), Some("MOV R1, c[0x0][0x28]"));
        assert_eq!(d.instruction("_Z4relu", 0x10), None);
        assert_eq!(d.instruction("other", 0), None);
    }

    /// The store keeps at most its byte limit, dropping the oldest; an
    /// instruction of a cubin it does not hold is None.
    #[test]
    fn store_is_bounded() {
        let mut store = CubinStore::new(10);
        for crc in 0..3 {
            store.add(&Cubin {
                crc,
                image: vec![0; 4],
            });
        }
        assert_eq!(store.bytes(), 8);
        assert!(!store.images.contains_key(&0));
        store.add(&Cubin {
            crc: 9,
            image: vec![0; 11],
        });
        assert!(!store.images.contains_key(&9));
        assert_eq!(store.instruction(0, "f", 0), None);
    }
}
