module ojas

go 1.19
