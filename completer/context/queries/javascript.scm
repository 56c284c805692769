; inherits: ecmascript
; Context captures for JavaScript (see python.scm for the capture names).

(class_declaration name: (identifier) @name) @scope @definition
