module libroute

go 1.19
