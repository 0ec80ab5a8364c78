"""How evaluation results are reported: confidence intervals and paired tests of success rates."""
