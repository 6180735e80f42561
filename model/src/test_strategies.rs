//! proptest strategies shared by the model's tests.

use proptest::prelude::*;

use crate::{FileId, Frame, FrameKind, LabelSet};

pub(crate) fn arb_kind() -> impl Strategy<Value = FrameKind> {
    (0..FrameKind::ALL.len()).prop_map(|i| FrameKind::ALL[i])
}

pub(crate) fn arb_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (arb_kind(), any::<u128>(), any::<u64>()).prop_map(|(kind, file, addr)| Frame::Address {
            kind,
            file_id: FileId(file),
            addr,
        }),
        (
            arb_kind(),
            ".{0,12}",
            prop::option::of(".{0,8}"),
            prop::option::of(".{0,8}"),
            any::<u32>()
        )
            .prop_map(|(kind, function, module, file, line)| Frame::Named {
                kind,
                function,
                module,
                file,
                line,
            }),
    ]
}

pub(crate) fn arb_labels() -> impl Strategy<Value = LabelSet> {
    prop::collection::vec(("[a-z]{1,5}", ".{0,6}"), 0..4)
        .prop_map(|pairs| pairs.into_iter().collect())
}
