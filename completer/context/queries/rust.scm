; Context captures for Rust (see python.scm for the capture names).

(function_item name: (identifier) @name) @scope @definition
(function_signature_item name: (identifier) @name) @definition
(struct_item name: (type_identifier) @name) @scope @definition
(enum_item name: (type_identifier) @name) @scope @definition
(trait_item name: (type_identifier) @name) @scope @definition
(union_item name: (type_identifier) @name) @scope @definition
(type_item name: (type_identifier) @name) @definition
(macro_definition name: (identifier) @name) @definition
(impl_item) @scope
(mod_item name: (identifier) @name) @scope
(closure_expression) @scope

(use_declaration) @import
(extern_crate_declaration) @import

(identifier) @identifier
(type_identifier) @identifier
(field_identifier) @identifier
