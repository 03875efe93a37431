//! Checkpoint errors are typed: `NnError::Checkpoint { path, source: CheckpointError::… }`
//! says which file and what kind of problem (a damaged zip, a hostile or malformed pickle, a
//! storage that does not fit, an unsupported dtype), and `source()` leads to the zip, JSON,
//! safetensors or tensor error underneath.

use std::error::Error as _;
use std::io::{Cursor, Read, Write};
use std::path::Path;

use tessera_nn::{
    CheckpointError, CheckpointLimit, NnError, StateDict, load_pt_state_dict, load_safetensors,
    save_pt_state_dict,
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

/// Whether `err` is the limit `limit` being hit.
fn hit(err: &CheckpointError, limit: CheckpointLimit) -> bool {
    matches!(err, CheckpointError::LimitExceeded { limit: l, value, allowed } if *l == limit && value > allowed)
}

#[test]
fn a_pickle_of_millions_of_one_byte_empty_lists_is_refused_by_the_memory_budget() {
    // `]` (EMPTY_LIST) is one byte; each builds a node several dozen bytes large.
    let mut pickle = b"\x80\x02]".to_vec();
    for _ in 0..2 {
        pickle.push(b'(');
        pickle.extend(std::iter::repeat_n(b']', 1_000_000));
        pickle.push(b'e');
    }
    pickle.push(b'.');
    let dir = tempfile::tempdir().unwrap();
    let err = refused(dir.path(), &with_pickle(dir.path(), &pickle));
    assert!(hit(&err, CheckpointLimit::PickleMemory), "{err:?}");
    assert!(err.to_string().contains("memory budget"), "{err}");
}

#[test]
fn a_pickle_that_copies_a_memoised_long_key_again_and_again_is_refused_by_the_memory_budget() {
    // A persistent id with a 100 kB storage key, memoised once; each `h\x00 Q 0` (four bytes)
    // gets it back and builds a storage reference holding a copy of the key.
    let key = vec![b'k'; 100_000];
    let mut pickle = b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\n".to_vec();
    pickle.push(b'X');
    pickle.extend((key.len() as u32).to_le_bytes());
    pickle.extend(&key);
    pickle.extend(b"X\x03\x00\x00\x00cpuK\x01tq\x000");
    for _ in 0..1000 {
        pickle.extend(b"h\x00Q0");
    }
    pickle.extend(b"}.");
    let dir = tempfile::tempdir().unwrap();
    let err = refused(dir.path(), &with_pickle(dir.path(), &pickle));
    assert!(hit(&err, CheckpointLimit::PickleMemory), "{err:?}");
}

#[test]
fn a_small_pickle_that_copies_its_key_a_few_times_still_loads() {
    // The same program with ten copies stays far inside the budget: an empty state dict.
    let mut pickle = b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tq\x000".to_vec();
    for _ in 0..10 {
        pickle.extend(b"h\x00Q0");
    }
    pickle.extend(b"}.");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.pt");
    std::fs::write(&path, with_pickle(dir.path(), &pickle)).unwrap();
    assert_eq!(load_pt_state_dict(&path).unwrap().len(), 0);
}

/// A safetensors file of `count` empty f32 tensors, with nothing else to make it large.
fn many_empty_tensors(count: usize) -> Vec<u8> {
    let mut header = String::from("{");
    for i in 0..count {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}"
        ));
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file
}

#[test]
fn a_safetensors_header_of_too_many_tensors_for_its_file_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.safetensors");
    // 200,000 tensors in 12 MB: the limit is 65,536 + one per 256 bytes (about 112,000).
    std::fs::write(&path, many_empty_tensors(200_000)).unwrap();
    let err = load_safetensors(&path).unwrap_err();
    let NnError::Checkpoint { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(hit(source, CheckpointLimit::SafetensorsTensors), "{err:?}");
    assert!(err.to_string().contains("tensor count limit"), "{err}");

    // Fewer tensors than the base allowance load, however small the file.
    std::fs::write(&path, many_empty_tensors(1_000)).unwrap();
    assert_eq!(load_safetensors(&path).unwrap().len(), 1_000);
}

#[test]
fn a_safetensors_header_declared_larger_than_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.safetensors");
    // A header one byte over the limit, present in full (a declared length past the end of
    // the file is a damaged file, which the parser reports).
    let header_len = 100_000_001usize;
    let mut file = (header_len as u64).to_le_bytes().to_vec();
    file.resize(8 + header_len, b' ');
    std::fs::write(&path, file).unwrap();
    let err = load_safetensors(&path).unwrap_err();
    let NnError::Checkpoint { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(hit(source, CheckpointLimit::SafetensorsHeader), "{err:?}");
}
