; Context captures for Go (see python.scm for the capture names).

(function_declaration name: (identifier) @name) @scope @definition
(method_declaration name: (field_identifier) @name) @scope @definition
(type_declaration (type_spec name: (type_identifier) @name)) @scope @definition
(func_literal) @scope

(import_declaration) @import
(package_clause) @import

(identifier) @identifier
(field_identifier) @identifier
(type_identifier) @identifier
