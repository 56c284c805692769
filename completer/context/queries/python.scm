; Context captures for Python (read by completer/context/syntax.py):
;   @scope       a node whose header (text up to its body) encloses code: class / function / method
;   @definition  a named definition whose signature may be shown; its name is @name
;   @import      an import statement, shown verbatim
;   @identifier  a use of a name near the cursor

(function_definition name: (identifier) @name) @scope @definition
(class_definition name: (identifier) @name) @scope @definition

(import_statement) @import
(import_from_statement) @import
(future_import_statement) @import

(identifier) @identifier
