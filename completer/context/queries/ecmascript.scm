; Context captures shared by JavaScript and TypeScript/TSX (see python.scm for the capture names); javascript.scm and
; typescript.scm start with "; inherits: ecmascript" and add what differs (class names are identifiers in one
; grammar and type_identifiers in the other).

(function_declaration name: (identifier) @name) @scope @definition
(generator_function_declaration name: (identifier) @name) @scope @definition
(method_definition name: (property_identifier) @name) @scope @definition
(lexical_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @scope @definition
(variable_declaration
  (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)])) @scope @definition

(import_statement) @import

(identifier) @identifier
(property_identifier) @identifier
