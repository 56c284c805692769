; Context captures for JavaScript (see python.scm for the capture names).

(function_declaration name: (identifier) @name) @scope @definition
(generator_function_declaration name: (identifier) @name) @scope @definition
(class_declaration name: (identifier) @name) @scope @definition
(method_definition name: (property_identifier) @name) @scope @definition
(lexical_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @scope @definition
(variable_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @scope @definition

(import_statement) @import

(identifier) @identifier
(property_identifier) @identifier
