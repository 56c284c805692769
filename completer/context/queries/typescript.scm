; inherits: ecmascript
; Context captures for TypeScript and TSX (see python.scm for the capture names).

(class_declaration name: (type_identifier) @name) @scope @definition
(abstract_class_declaration name: (type_identifier) @name) @scope @definition
(interface_declaration name: (type_identifier) @name) @scope @definition
(enum_declaration name: (identifier) @name) @scope @definition
(internal_module name: (_) @name) @scope
(function_signature name: (identifier) @name) @definition
(type_alias_declaration name: (type_identifier) @name) @definition

(type_identifier) @identifier
