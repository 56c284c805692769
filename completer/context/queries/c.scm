; Context captures for C (see python.scm for the capture names).

(function_definition
  declarator: [(function_declarator declarator: (identifier) @name)
               (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))]) @scope @definition
(declaration
  declarator: [(function_declarator declarator: (identifier) @name)
               (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))]) @definition
(struct_specifier name: (type_identifier) @name body: (field_declaration_list)) @scope @definition
(union_specifier name: (type_identifier) @name body: (field_declaration_list)) @scope @definition
(enum_specifier name: (type_identifier) @name body: (enumerator_list)) @scope @definition
(type_definition declarator: (type_identifier) @name) @definition
(preproc_function_def name: (identifier) @name) @definition

(preproc_include) @import

(identifier) @identifier
(type_identifier) @identifier
(field_identifier) @identifier
