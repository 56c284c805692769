; Context captures for TypeScript and TSX (see python.scm for the capture names).

(function_declaration name: (identifier) @name) @scope @definition
(generator_function_declaration name: (identifier) @name) @scope @definition
(class_declaration name: (type_identifier) @name) @scope @definition
(abstract_class_declaration name: (type_identifier) @name) @scope @definition
(interface_declaration name: (type_identifier) @name) @scope @definition
(enum_declaration name: (identifier) @name) @scope @definition
(method_definition name: (property_identifier) @name) @scope @definition
(internal_module name: (_) @name) @scope
(function_signature name: (identifier) @name) @definition
(type_alias_declaration name: (type_identifier) @name) @definition
(lexical_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @scope @definition
(variable_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @scope @definition

(import_statement) @import

(identifier) @identifier
(property_identifier) @identifier
(type_identifier) @identifier
