//! `kiln_model::Envelope::parse` on arbitrary bytes, MAC verification
//! included: never a panic; what parses under the fuzz key encodes to the
//! same bytes, and no other key verifies it. The input is also wrapped in
//! a fresh envelope (its first bytes as the tenant) and read back, so the
//! signing path runs on every input, not only on the rare forged MAC.
//! Seeds in `fuzz/seeds/envelope_parse` are envelopes signed with
//! [`FUZZ_KEY`] (`model/tests/fuzz_seeds.rs` writes them).
#![no_main]

use kiln_model::Envelope;
use libfuzzer_sys::fuzz_target;

/// The bus key the seeds are signed with.
const FUZZ_KEY: &[u8] = b"kiln-fuzz-bus-key-0123456789";

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope) = Envelope::parse(data, FUZZ_KEY) {
        assert_eq!(
            envelope.encode(FUZZ_KEY),
            data,
            "a verified envelope encodes to its bytes"
        );
        assert!(Envelope::parse(data, b"another key").is_err());
        let _ = kiln_model::Batch::decode(envelope.batch());
    }
    let (name, batch) = data.split_at(data.len().min(8));
    let tenant = String::from_utf8_lossy(name).to_lowercase();
    if let Ok(envelope) = Envelope::new(&tenant, "p", 1, batch) {
        let bytes = envelope.encode(FUZZ_KEY);
        assert_eq!(Envelope::parse(&bytes, FUZZ_KEY).unwrap(), envelope);
    }
});
