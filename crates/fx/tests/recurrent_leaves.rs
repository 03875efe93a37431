//! The recurrent layers under module-level tracing: each call is one typed `call_module` leaf
//! (`ModuleKind::LSTM`, ...) with all its outputs, printed with its repr, parsing back.

use tessera_fx::trace::{LeafPolicy, trace};
use tessera_fx::{Graph, NodeKind};
use tessera_nn::layers::{GRUCell, LSTM, Linear, RecurrentOptions};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleKind, Result};
use tessera_tensor::{DType, Tensor, TensorMeta};

/// An LSTM encoder, a GRU cell over its last output and a linear head.
#[derive(Module)]
struct Tagger {
    core: ModuleCore,
    lstm: LSTM,
    cell: GRUCell,
    head: Linear,
}

impl Forward for Tagger {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let (output, (h_n, _)) = self.lstm.call(x)?;
        let last = h_n.select(0, 1)?;
        let state = self.cell.call((output.select(1, 0)?, last))?;
        self.head.call(state)
    }
}

#[test]
fn recurrent_layers_are_typed_leaves_that_print_and_parse() -> tessera_fx::Result<()> {
    let options = RecurrentOptions::default()
        .bidirectional(true)
        .batch_first(true);
    let model = Tagger {
        core: ModuleCore::default(),
        lstm: LSTM::with_options(3, 4, options).unwrap(),
        cell: GRUCell::new(8, 4).unwrap(),
        head: Linear::new(4, 2).unwrap(),
    };
    let traced = trace(
        &model,
        TensorMeta::new([2, 5, 3], DType::F32),
        LeafPolicy::default(),
    )?;
    let graph = &traced.graph;
    let leaves: Vec<(String, ModuleKind, usize)> = graph
        .nodes()
        .filter_map(|id| {
            let node = graph.node(&id).ok()?;
            match &node.kind {
                NodeKind::CallModule { target, kind, .. } => {
                    Some((target.clone(), kind.clone(), node.meta.len()))
                }
                _ => None,
            }
        })
        .collect();
    assert_eq!(
        leaves,
        [
            ("lstm".to_string(), ModuleKind::LSTM, 3),
            ("cell".to_string(), ModuleKind::GRUCell, 1),
            ("head".to_string(), ModuleKind::Linear, 1),
        ]
    );
    let printed = graph.to_string();
    assert!(
        printed.contains("call_module[lstm: LSTM(3, 4, batch_first=True, bidirectional=True)]"),
        "{printed}"
    );
    assert_eq!(Graph::parse(&printed)?.to_string(), printed);
    Ok(())
}
