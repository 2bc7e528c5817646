"""Query text: event-query construction (`queries`) and SALI's subject/object spans (`spans`)."""
