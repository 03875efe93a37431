//! `op_identity!`, which writes in one line the methods of `OpDef` that say how an op is
//! known: its printed name, how its attributes print and its kind; and `variant_names!`, the
//! printed name of each variant of an op family.

/// Writes `OpDef::name` (when given as a literal, or as `op_name` for a family whose
/// `variant_names!` list names it), `OpDef::attributes` and `OpDef::kind`.
/// Attributes print as `none` (the name says everything), `fields` (a struct's serde form)
/// or `variant` (the fields of an enum family's variant).
macro_rules! op_identity {
    (name: $name:literal, attributes: $form:ident, kind: $kind:ident) => {
        fn name(&self) -> String {
            $name.into()
        }
        op_identity!(attributes: $form, kind: $kind);

    };
    (name: op_name, attributes: $form:ident, kind: $kind:ident) => {
        fn name(&self) -> String {
            self.op_name().into()
        }
        op_identity!(attributes: $form, kind: $kind);
    };
    (attributes: $form:ident, kind: $kind:ident) => {
        fn attributes(&self) -> Option<String> {
            op_identity!(@attributes self, $form)
        }
        fn kind(&self) -> OpKind {
            OpKind::$kind
        }
    };
    (@attributes $self:ident, none) => {
        None
    };
    (@attributes $self:ident, fields) => {
        super::text::struct_attributes($self)
    };
    (@attributes $self:ident, variant) => {
        super::text::variant_attributes($self)
    };
}

/// Writes `op_name`, the printed name of each variant of an op family (whatever its fields).
macro_rules! variant_names {
    ($family:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $family {
            /// The op's printed name.
            pub(crate) fn op_name(&self) -> &'static str {
                match self {
                    $($family::$variant { .. } => $name,)+
                }
            }
        }
    };
}
