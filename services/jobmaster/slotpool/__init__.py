"""The JobMaster's slots: its slot pool, slot requests and slot sharing."""
