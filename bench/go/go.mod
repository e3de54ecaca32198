module ojas-train-bench

go 1.19

require ojas v0.0.0

replace ojas => ../../go
