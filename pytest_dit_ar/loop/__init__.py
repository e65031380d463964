"""The loop layer: one baseline or one experiment: guards, evidence, the verdict, keep or reset."""
