; Context captures for C++ (see python.scm for the capture names).

(function_definition
  declarator: [(function_declarator declarator: (_) @name)
               (pointer_declarator declarator: (function_declarator declarator: (_) @name))
               (reference_declarator (function_declarator declarator: (_) @name))]) @scope @definition
(declaration
  declarator: [(function_declarator declarator: (_) @name)
               (pointer_declarator declarator: (function_declarator declarator: (_) @name))]) @definition
(field_declaration declarator: (function_declarator declarator: (_) @name)) @definition
(class_specifier name: (_) @name body: (field_declaration_list)) @scope @definition
(struct_specifier name: (_) @name body: (field_declaration_list)) @scope @definition
(union_specifier name: (_) @name body: (field_declaration_list)) @scope @definition
(enum_specifier name: (_) @name body: (enumerator_list)) @scope @definition
(namespace_definition) @scope
(lambda_expression) @scope
(type_definition declarator: (type_identifier) @name) @definition
(alias_declaration name: (type_identifier) @name) @definition
(preproc_function_def name: (identifier) @name) @definition

(preproc_include) @import
(using_declaration) @import

(identifier) @identifier
(type_identifier) @identifier
(field_identifier) @identifier
(namespace_identifier) @identifier
