module example.invalid/nbv/cluster/pause

go 1.22
