//! Checkpoint errors are typed: `NnError::Checkpoint { path, source: CheckpointError::… }`
//! says which file and what kind of problem (a damaged zip, a hostile or malformed pickle, a
//! storage that does not fit, an unsupported dtype), and `source()` leads to the zip, JSON,
//! safetensors or tensor error underneath.

use std::error::Error as _;
use std::io::{Cursor, Read, Write};
use std::path::Path;

use tessera_nn::{
    CheckpointError, NnError, StateDict, load_pt_state_dict, load_safetensors, save_pt_state_dict,
};
use tessera_tensor::Tensor;
use zip::CompressionMethod;
use zip::write::SimpleFileOptions;

/// A `.pt` file of `{"w": [1, 2, 3]}` written by Tessera.
fn saved_pt(dir: &Path) -> Vec<u8> {
    let mut state = StateDict::new();
    state.insert("w", Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
    let path = dir.join("good.pt");
    save_pt_state_dict(&state, &path).unwrap();
    std::fs::read(path).unwrap()
}

/// The zip `bytes` with each entry passed through `edit` (dropped where it returns `None`).
fn rewritten(bytes: &[u8], edit: impl Fn(&str, Vec<u8>) -> Option<Vec<u8>>) -> Vec<u8> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).unwrap();
        let name = entry.name().unwrap().to_string();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        drop(entry);
        if let Some(data) = edit(&name, data) {
            out.start_file(name, options).unwrap();
            out.write_all(&data).unwrap();
        }
    }
    out.finish().unwrap().into_inner()
}

/// The good checkpoint with `data.pkl` replaced by `pickle`.
fn with_pickle(dir: &Path, pickle: &[u8]) -> Vec<u8> {
    rewritten(&saved_pt(dir), |name, data| {
        Some(if name.ends_with("/data.pkl") {
            pickle.to_vec()
        } else {
            data
        })
    })
}

/// Loads `bytes` as `x.pt` and returns what is wrong, checking the file is named.
fn refused(dir: &Path, bytes: &[u8]) -> CheckpointError {
    let path = dir.join("x.pt");
    std::fs::write(&path, bytes).unwrap();
    match load_pt_state_dict(&path) {
        Ok(_) => panic!("a damaged checkpoint loaded"),
        Err(NnError::Checkpoint { path, source }) => {
            assert!(path.ends_with("x.pt"), "{path}");
            *source
        }
        Err(other) => panic!("expected a checkpoint error, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_zip_keeps_the_zip_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(dir.path(), b"definitely not a zip file");
    assert!(matches!(err, CheckpointError::NotAZip { .. }), "{err:?}");
    assert!(err.source().is_some(), "the zip error is kept");
    assert!(
        err.to_string()
            .starts_with("not a PyTorch zip checkpoint: ")
    );
}

#[test]
fn a_forbidden_global_is_refused_by_name_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut pickle = vec![0x80, 2, b'c'];
    pickle.extend_from_slice(b"os\nsystem\n");
    pickle.push(b'.');
    let err = refused(dir.path(), &with_pickle(dir.path(), &pickle));
    assert!(
        matches!(
            &err,
            CheckpointError::UnsupportedGlobal { offset: 2, module, name }
                if module == "os" && name == "system"
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("pickle byte 2: refusing to load global os.system")
    );
}

#[test]
fn a_malformed_pickle_names_the_byte() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(
        dir.path(),
        &with_pickle(dir.path(), &[0x80, 2, b'h', 9, b'.']),
    );
    assert!(
        matches!(&err, CheckpointError::Pickle { offset: 2, problem } if problem.contains("memo key 9")),
        "{err:?}"
    );
}

#[test]
fn storage_records_that_are_missing_or_short_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = saved_pt(dir.path());
    let missing = rewritten(&good, |name, data| {
        (!name.ends_with("/data/0")).then_some(data)
    });
    let err = refused(dir.path(), &missing);
    assert!(
        matches!(&err, CheckpointError::MissingRecord { name, .. } if name.ends_with("/data/0")),
        "{err:?}"
    );
    assert!(err.source().is_some(), "the zip error is kept");

    let short = rewritten(&good, |name, data| {
        Some(if name.ends_with("/data/0") {
            data[..8].to_vec()
        } else {
            data
        })
    });
    let err = refused(dir.path(), &short);
    assert!(
        matches!(&err, CheckpointError::Storage { key, .. } if key == "0"),
        "{err:?}"
    );
    assert!(err.to_string().contains("holds 8 bytes"), "{err}");
}

/// Writes a safetensors file of `tensors` with `metadata` and loads it as a state dict.
fn safetensors_refused(
    tensors: Vec<(&str, safetensors::tensor::TensorView<'_>)>,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> CheckpointError {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.safetensors");
    std::fs::write(&path, safetensors::serialize(tensors, metadata).unwrap()).unwrap();
    match load_safetensors(&path) {
        Ok(_) => panic!("a bad safetensors file loaded"),
        Err(NnError::Checkpoint { source, .. }) => *source,
        Err(other) => panic!("expected a checkpoint error, got {other:?}"),
    }
}

#[test]
fn safetensors_problems_are_typed() {
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;
    let bytes = [0u8; 4];
    let u16s = TensorView::new(Dtype::U16, vec![2], &bytes).unwrap();
    let err = safetensors_refused(vec![("w", u16s)], None);
    assert!(
        matches!(&err, CheckpointError::Dtype { key, dtype } if key == "w" && dtype == "U16"),
        "{err:?}"
    );

    let f32s = TensorView::new(Dtype::F32, vec![1], &bytes).unwrap();
    let order = [("tessera.order".to_string(), "not json".to_string())];
    let err = safetensors_refused(vec![("w", f32s)], Some(order.into_iter().collect()));
    assert!(
        matches!(
            err,
            CheckpointError::Metadata {
                key: "tessera.order",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.source().is_some(), "the JSON error is kept");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.safetensors");
    std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\xffgarbage").unwrap();
    let err = load_safetensors(&path).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint { source, .. }
            if matches!(**source, CheckpointError::Safetensors { .. })),
        "{err:?}"
    );
    // The chain: NnError -> CheckpointError -> safetensors' own error.
    let inner = err.source().and_then(|e| e.source());
    assert!(inner.is_some(), "{err:?}");
}
