export * from './connector';
export * from './classify';
export * from './http-exchange';
export * from './registry';
export * from './sandbox-payments.connector';
export * from './sandbox-sms.connector';
