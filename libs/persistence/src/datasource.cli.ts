// The DataSource the TypeORM CLI uses: npm run migration:run | migration:revert | migration:generate.
import { loadConfig } from '@verity/platform';
import { createDataSource } from './data-source';

export default createDataSource(loadConfig().DATABASE_URL);
