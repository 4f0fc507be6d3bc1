"""How evidence is shown to people: terminal tables and the HTML report. Rendering only."""
